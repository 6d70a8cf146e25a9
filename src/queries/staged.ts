import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/**
 * Stages jobs from enqueue's JSON entries (see jsonEntry), in one statement; returns the
 * staged ids in input order. A delay becomes run_at here: it counts from staging.
 */
export async function stageJobs(db: Queryable, schema: string, jobsJson: string): Promise<string[]> {
  const s = ident(schema);
  const { rows } = await db.query<{ ids: string | null }>(
    `WITH ins AS (
       INSERT INTO ${s}.staged_jobs (task, payload, options)
       SELECT e.x->>'task', coalesce(e.x->'payload', 'null'),
              e.x - 'task' - 'payload' - 'delay_ms'
                || CASE WHEN e.x ? 'delay_ms'
                        THEN jsonb_build_object('run_at', now() + (e.x->>'delay_ms')::bigint * interval '1 millisecond')
                        ELSE '{}' END
       FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(x, n)
       ORDER BY e.n
       RETURNING id)
     SELECT string_agg(id::text, ',' ORDER BY id) AS ids FROM ins`,
    [jobsJson],
  );
  return rows[0]?.ids?.split(',') ?? [];
}

/** A staged row as the drainer reads it: the payload stays JSON text until a sink parses it. */
export interface StagedRow {
  id: string;
  /** The schema's key space, drawn when it was made (see StagedJob.key). */
  key_space: string;
  task: string;
  payload: string;
  options: Record<string, unknown>;
  staged_at: Date;
}

/**
 * The oldest `limit` staged rows, in id order, among those committed now: a row whose
 * transaction is still open is not waited for (it comes in a later batch).
 * With `sendMs`, when there are rows, records in drainer_lease that a send of them may run
 * until `sendMs` from now by the database's clock (see takeoverWaitMs).
 */
export async function selectStaged(
  db: Queryable,
  schema: string,
  limit: number,
  sendMs: number | null = null,
): Promise<StagedRow[]> {
  const s = ident(schema);
  const { rows } = await db.query<StagedRow>(
    // ORDER BY s.id: a bare "id" would sort by the text column of the output
    `WITH batch AS (
       SELECT s.id, s.task, s.payload, s.options, s.staged_at FROM ${s}.staged_jobs s ORDER BY s.id LIMIT $1),
     busy AS (
       UPDATE ${s}.drainer_lease SET busy_until = clock_timestamp() + $2::float8 * interval '1 millisecond'
       WHERE $2::float8 IS NOT NULL AND EXISTS (SELECT 1 FROM batch))
     SELECT b.id::text AS id, l.key_space, b.task, b.payload::text AS payload, b.options, b.staged_at
     FROM batch b CROSS JOIN ${s}.drainer_lease l ORDER BY b.id`,
    [limit, sendMs],
  );
  return rows;
}

/**
 * Deletes forwarded rows; returns how many were there. With `sent`, also records that
 * the send of them is over (nothing for a drainer taking over to wait for).
 */
export async function deleteStaged(db: Queryable, schema: string, ids: string[], sent = false): Promise<number> {
  const s = ident(schema);
  const { rowCount } = await db.query(
    `WITH done AS (UPDATE ${s}.drainer_lease SET busy_until = NULL WHERE $2::boolean)
     DELETE FROM ${s}.staged_jobs WHERE id = ANY($1::bigint[])`,
    [ids, sent],
  );
  return rowCount ?? 0;
}

/** Records that the last send is over (it failed): nothing for a drainer taking over to wait for. */
export async function sendOver(db: Queryable, schema: string): Promise<void> {
  await db.query(`UPDATE ${ident(schema)}.drainer_lease SET busy_until = NULL`);
}

/**
 * How long a drainer that has just taken the lock waits before it sends: until a send of
 * the previous holder, whose connection may have been lost mid-send, has timed out
 * (drainer_lease.busy_until), and `marginMs` more. 0 when nothing can still be running.
 */
export async function takeoverWaitMs(db: Queryable, schema: string, marginMs: number): Promise<number> {
  const { rows } = await db.query<{ ms: number | null }>(
    `SELECT ceil(extract(epoch FROM l.busy_until + $1::float8 * interval '1 millisecond' - clock_timestamp()) * 1000)::float8 AS ms
     FROM ${ident(schema)}.drainer_lease l`,
    [marginMs],
  );
  return Math.max(0, rows[0]?.ms ?? 0);
}

/** How many rows wait to be drained. */
export async function countStaged(db: Queryable, schema: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::integer AS n FROM ${ident(schema)}.staged_jobs`);
  return rows[0]?.n ?? 0;
}

// The drainer's session lock: (hashtext('<schema>:drain'), 0), a key space of its own
const DRAIN_LOCK = 'hashtext($1), 0';

/** Takes the drainer's session lock if free (one active drainer per schema). */
export async function tryDrainLock(db: Queryable, schema: string): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(`SELECT pg_try_advisory_lock(${DRAIN_LOCK}) AS ok`, [
    `${schema}:drain`,
  ]);
  return rows[0]?.ok === true;
}

/** Releases the drainer's session lock. */
export async function releaseDrainLock(db: Queryable, schema: string): Promise<void> {
  await db.query(`SELECT pg_advisory_unlock(${DRAIN_LOCK})`, [`${schema}:drain`]);
}
