import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** A task's definition as workers record it for producers (see task_definitions in sql/000030_baseline.sql). */
export interface RecordedDefinition {
  task: string;
  tenant: string | null;
  queue: string | null;
  maxAttempts: number | null;
  /** 'exponential', milliseconds, or 'function' (a backoff only the worker can compute). */
  backoff: 'exponential' | 'function' | number | null;
  retryQueue: string | null;
  /** Time limit of an attempt; null: none. */
  timeoutMs: number | null;
  isolated: boolean;
  /** JSON Schema (draft 2020-12) of the payload, or null. */
  payloadSchema: Record<string, unknown> | null;
  /** Why a task with a schema has no JSON Schema here (its validator exports none). */
  schemaMissing: string | null;
  recordedBy: string;
  recordedAt: Date;
}

/** Records (replaces) the definitions of these tasks, one row a task. */
export async function recordDefinitions(
  db: Queryable,
  schema: string,
  definitions: ReadonlyArray<Omit<RecordedDefinition, 'recordedAt'>>,
): Promise<void> {
  if (definitions.length === 0) return;
  const entries = definitions.map((d) => ({
    task: d.task,
    tenant: d.tenant,
    queue: d.queue,
    max_attempts: d.maxAttempts,
    backoff: d.backoff,
    retry_queue: d.retryQueue,
    timeout_ms: d.timeoutMs,
    isolated: d.isolated,
    payload_schema: d.payloadSchema,
    schema_missing: d.schemaMissing,
    recorded_by: d.recordedBy,
  }));
  // one statement; sorted by task so that two workers starting together lock rows in one order
  await db.query(
    `INSERT INTO ${ident(schema)}.task_definitions AS t
       (task, tenant, queue, max_attempts, backoff, retry_queue, timeout_ms, isolated, payload_schema,
        schema_missing, recorded_by, recorded_at)
     SELECT x.task, x.tenant, x.queue, x.max_attempts, x.backoff, x.retry_queue, x.timeout_ms, x.isolated,
            x.payload_schema, x.schema_missing, x.recorded_by, now()
     FROM jsonb_to_recordset($1::jsonb) AS x(task text, tenant text, queue text, max_attempts integer,
            backoff jsonb, retry_queue text, timeout_ms integer, isolated boolean, payload_schema jsonb,
            schema_missing text, recorded_by text)
     ORDER BY x.task
     ON CONFLICT (task) DO UPDATE SET
       tenant = excluded.tenant, queue = excluded.queue, max_attempts = excluded.max_attempts,
       backoff = excluded.backoff, retry_queue = excluded.retry_queue, timeout_ms = excluded.timeout_ms,
       isolated = excluded.isolated, payload_schema = excluded.payload_schema,
       schema_missing = excluded.schema_missing, recorded_by = excluded.recorded_by,
       recorded_at = excluded.recorded_at`,
    [JSON.stringify(entries)],
  );
}

/** Every recorded definition, by task name. */
export async function recordedDefinitions(db: Queryable, schema: string): Promise<RecordedDefinition[]> {
  const { rows } = await db.query<{
    task: string;
    tenant: string | null;
    queue: string | null;
    max_attempts: number | null;
    backoff: RecordedDefinition['backoff'];
    retry_queue: string | null;
    timeout_ms: number | null;
    isolated: boolean;
    payload_schema: Record<string, unknown> | null;
    schema_missing: string | null;
    recorded_by: string;
    recorded_at: Date;
  }>(
    `SELECT task, tenant, queue, max_attempts, backoff, retry_queue, timeout_ms, isolated, payload_schema,
            schema_missing, recorded_by, recorded_at
     FROM ${ident(schema)}.task_definitions ORDER BY task`,
  );
  return rows.map((r) => ({
    task: r.task,
    tenant: r.tenant,
    queue: r.queue,
    maxAttempts: r.max_attempts,
    backoff: r.backoff,
    retryQueue: r.retry_queue,
    timeoutMs: r.timeout_ms,
    isolated: r.isolated,
    payloadSchema: r.payload_schema,
    schemaMissing: r.schema_missing,
    recordedBy: r.recorded_by,
    recordedAt: r.recorded_at,
  }));
}
