import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import type { JobError } from '../types.js';
import { CLAIMED_COLUMNS, type ClaimedRow } from './claimJobs.js';
import { errorJson, type OutcomeEntry } from './outcomes.js';

/** A leased job as fetch_jobs returns it. */
export interface LeasedRow extends ClaimedRow {
  lease_until: Date;
}

export async function fetchJobs(
  db: Queryable,
  schema: string,
  args: { count: number; leaseMs: number; queue: string | null; tenant: string | null },
): Promise<LeasedRow[]> {
  const { rows } = await db.query<LeasedRow>(
    `SELECT ${CLAIMED_COLUMNS}, lease_until FROM ${ident(schema)}.fetch_jobs($1, $2, $3, $4)`,
    [args.count, args.leaseMs, args.queue, args.tenant],
  );
  return rows;
}

/** True if acked; false if the lease is not held any more. */
export async function ackJob(
  db: Queryable,
  schema: string,
  outcome: Pick<OutcomeEntry, 'id' | 'token' | 'result'>,
): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(`SELECT ${ident(schema)}.ack_job($1, $2, $3::jsonb) AS ok`, [
    outcome.id,
    outcome.token,
    outcome.result ?? null,
  ]);
  return rows[0]?.ok ?? false;
}

/** A consumer's nack: its `error` fields go over the record nack_job writes (name 'Nack', attempt, time). */
export type NackOutcome = Pick<OutcomeEntry, 'id' | 'token' | 'delayMs'> & { error?: Partial<JobError> };

/** The job's state after the nack, null if the lease is not held any more. */
export async function nackJob(db: Queryable, schema: string, outcome: NackOutcome): Promise<string | null> {
  const { rows } = await db.query<{ state: string | null }>(
    `SELECT ${ident(schema)}.nack_job($1, $2, $3, $4::jsonb)::text AS state`,
    [outcome.id, outcome.token, outcome.delayMs ?? 0, outcome.error === undefined ? null : errorJson(outcome.error)],
  );
  return rows[0]?.state ?? null;
}

/**
 * WORKING: the lease's new end and whether a cancel of its job was asked for, in one
 * statement (what a consumer without a signal learns of a cancel); null if the lease is
 * not held any more.
 */
export async function working(
  db: Queryable,
  schema: string,
  id: string,
  token: string,
  ms: number,
): Promise<{ leaseUntil: Date; cancelRequested: boolean } | null> {
  const { rows } = await db.query<{ until: Date | null; cancel: boolean | null }>(
    `SELECT lease_until AS until, cancel_requested AS cancel FROM ${ident(schema)}.working($1, $2, $3)`,
    [id, token, ms],
  );
  const r = rows[0];
  return r?.until ? { leaseUntil: r.until, cancelRequested: r.cancel === true } : null;
}

/** Where a job is now: for explaining a refused lease operation. */
export async function leaseState(
  db: Queryable,
  schema: string,
  id: string,
): Promise<{ state: string; attempts: number; token: string | null } | null> {
  const s = ident(schema);
  const { rows } = await db.query<{ state: string; attempts: number; token: string | null }>(
    `(SELECT state::text, attempts, lease_token AS token FROM ${s}.jobs WHERE id = $1)
     UNION ALL (SELECT state::text, attempts, NULL FROM ${s}.job_history WHERE id = $1) LIMIT 1`,
    [id],
  );
  return rows[0] ?? null;
}
