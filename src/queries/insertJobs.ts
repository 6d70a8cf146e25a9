import pg from 'pg';
import type { JobRecord } from '../client/entries.js';
import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { TuskValidationError } from '../errors.js';

/**
 * Inserts jobs in one statement from a JSON array of
 * `{task, payload, tenant?, queue?, priority?, run_at?, delay_ms?, max_attempts?,
 *   concurrency_key?, expires_at?, retry?, source_type?, source_id?, source_method?}`; returns the new ids in input order.
 * The insert trigger sends one NOTIFY for the whole statement.
 */
export async function insertJobs(db: Queryable, schema: string, jobsJson: string): Promise<string[]> {
  const s = ident(schema);
  // jsonb_to_recordset yields the array in order and identity values are drawn in insert
  // order, so the sorted ids are in input order (no ORDINALITY sort needed); one string
  // of ids instead of a row per job keeps the reply cheap to parse.
  const text = `WITH ins AS (
       INSERT INTO ${s}.jobs (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                              concurrency_key, expires_at, retry, source_type, source_id, source_method)
       SELECT coalesce(x.tenant, 'default'), coalesce(x.queue, 'default'), x.task,
              coalesce(x.payload, 'null'), coalesce(x.priority, 0),
              CASE WHEN r.run_at > now() THEN 'scheduled' ELSE 'available' END::${s}.job_state,
              r.run_at, coalesce(x.max_attempts, 5), coalesce(x.concurrency_key, ''), x.expires_at, x.retry,
              x.source_type, x.source_id, x.source_method
       FROM jsonb_to_recordset($1::jsonb) AS x(
              task text, payload jsonb, tenant text, queue text, priority smallint,
              run_at timestamptz, delay_ms bigint, max_attempts integer, concurrency_key text,
              expires_at timestamptz, retry jsonb, source_type text, source_id text, source_method text)
       CROSS JOIN LATERAL (
         SELECT coalesce(x.run_at, now() + coalesce(x.delay_ms, 0) * interval '1 millisecond') AS run_at) r
       RETURNING id)
     SELECT string_agg(id::text, ',') AS ids FROM ins`;
  // pg connections prepare it once (saves parsing and planning on every enqueue); any other
  // query(text, values) object gets the plain text
  const { rows } =
    db instanceof pg.Pool || db instanceof pg.Client
      ? await db.query<{ ids: string | null }>({ name: `tusk_insert_${schema}`, text, values: [jobsJson] })
      : await db.query<{ ids: string | null }>(text, [jobsJson]);
  const ids = rows[0]?.ids;
  return ids ? ids.split(',').sort(compareIds) : [];
}

/** Orders bigint ids given as decimal strings. */
export const compareIds = (a: string, b: string): number => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);

/**
 * Inserts jobs of which some carry a dedup key (see enqueue_dedup in sql/); returns, in
 * input order, each entry's job id and whether it matched an existing job.
 */
export async function insertJobsDedup(
  db: Queryable,
  schema: string,
  jobsJson: string,
): Promise<Array<{ id: string; deduplicated: boolean }>> {
  const { rows } = await db.query<{ id: string; deduplicated: boolean }>(
    `SELECT id, deduplicated FROM ${ident(schema)}.enqueue_dedup($1::jsonb) ORDER BY ord`,
    [jobsJson],
  );
  return rows;
}

/**
 * Inserts one job with plain parameters: cheaper than building and parsing a JSON
 * document for a batch of one (single enqueues are latency-bound).
 */
export async function insertJob(db: Queryable, schema: string, r: JobRecord): Promise<string> {
  const s = ident(schema);
  const text = `INSERT INTO ${s}.jobs (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                 concurrency_key, expires_at, retry, source_type, source_id, source_method)
     SELECT $1, $2, $3, $4::jsonb, $5, CASE WHEN r.at > now() THEN 'scheduled' ELSE 'available' END::${s}.job_state,
            r.at, $8, $9, $10, $11::jsonb, $12, $13, $14
     FROM (SELECT coalesce($6::timestamptz, now() + $7::bigint * interval '1 millisecond') AS at) r
     RETURNING id`;
  const values = [
    r.tenant ?? 'default',
    r.queue ?? 'default',
    r.task,
    r.payload,
    r.priority ?? 0,
    r.runAt ?? null,
    r.delayMs ?? 0,
    r.maxAttempts ?? 5,
    r.concurrencyKey ?? '',
    r.expiresAt ?? null,
    r.retry ?? null,
    r.sourceType ?? null,
    r.sourceId ?? null,
    r.sourceMethod ?? null,
  ];
  const { rows } =
    db instanceof pg.Pool || db instanceof pg.Client
      ? await db.query<{ id: string }>({ name: `tusk_insert_one_${schema}`, text, values })
      : await db.query<{ id: string }>(text, values);
  return rows[0]?.id as string;
}

/**
 * Inserts jobs of which some depend on others (see enqueue_flow in sql/): one statement,
 * so the jobs and their dependencies are written together or not at all. Returns the ids
 * in input order. A dependency that is no job is a TuskValidationError naming it (the
 * database says which, as the error's column).
 */
export async function insertJobsFlow(db: Queryable, schema: string, jobsJson: string): Promise<string[]> {
  try {
    const { rows } = await db.query<{ id: string }>(
      `SELECT f.id::text AS id FROM ${ident(schema)}.enqueue_flow($1::jsonb) WITH ORDINALITY AS f(id, n) ORDER BY f.n`,
      [jobsJson],
    );
    return rows.map((r) => r.id);
  } catch (error) {
    throw refusedArgument(error) ?? error;
  }
}

/** A refusal of enqueue_flow (SQLSTATE 22023 with the field as its column), as a TuskValidationError. */
function refusedArgument(error: unknown): TuskValidationError | null {
  // an adapter (Drizzle) may wrap the driver's error
  for (let e = error as PgError | undefined, depth = 0; e && depth < 5; e = e.cause as PgError | undefined, depth++) {
    if (e.code === '22023' && typeof e.column === 'string' && typeof e.message === 'string') {
      const prefix = `tusk: ${e.column} `;
      return new TuskValidationError(
        e.column,
        e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message,
      );
    }
  }
  return null;
}

type PgError = { code?: string; column?: string; message?: string; cause?: unknown };
