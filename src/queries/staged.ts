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
  task: string;
  payload: string;
  options: Record<string, unknown>;
  staged_at: Date;
}

/** The oldest `limit` staged rows, in id order. */
export async function selectStaged(db: Queryable, schema: string, limit: number): Promise<StagedRow[]> {
  const { rows } = await db.query<StagedRow>(
    // ORDER BY s.id: a bare "id" would sort by the text column of the output
    `SELECT s.id::text AS id, s.task, s.payload::text AS payload, s.options, s.staged_at
     FROM ${ident(schema)}.staged_jobs s ORDER BY s.id LIMIT $1`,
    [limit],
  );
  return rows;
}

/** Deletes forwarded rows; returns how many were there. */
export async function deleteStaged(db: Queryable, schema: string, ids: string[]): Promise<number> {
  const { rowCount } = await db.query(`DELETE FROM ${ident(schema)}.staged_jobs WHERE id = ANY($1::bigint[])`, [ids]);
  return rowCount ?? 0;
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
