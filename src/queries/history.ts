import type { PreparedQueryable, Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { FINISHED_COLUMNS, type JobRow } from './jobColumns.js';

/** What one batch of history upkeep did (see maintain_history in sql/). */
export interface PruneBatch {
  /** Day partitions dropped whole. */
  dropped: string[];
  /** Rows deleted (tenants kept shorter than the longest retention). */
  deleted: number;
  /** Partitions created (days ahead, and days found in the default partition). */
  created: number;
  /** Work is left: call again. */
  more: boolean;
}

/**
 * Creates partitions ahead and applies one batch of retention, if no other process is
 * doing it (null then).
 */
export async function maintainHistory(db: Queryable, schema: string, batch: number): Promise<PruneBatch | null> {
  const { rows } = await db.query<{ r: PruneBatch | null }>(`SELECT ${ident(schema)}.maintain_history($1) AS r`, [
    batch,
  ]);
  return rows[0]?.r ?? null;
}

/**
 * Summarizes the new ranges of the history's BRIN index on the finish time, in the
 * partitions that take rows, as the server's autosummarize would if its queue of requests
 * kept up (see summarize_history_index in sql/); returns the ranges summarized. A
 * transaction of its own: it reads the pages written since the last call.
 */
export async function summarizeHistoryIndex(db: Queryable, schema: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT ${ident(schema)}.summarize_history_index() AS n`);
  return rows[0]?.n ?? 0;
}

/** Sets a tenant's retention, or the default's with `tenant` null; `null` resets it. */
export async function updateRetention(
  db: Queryable,
  schema: string,
  tenant: string | null,
  retention: string | null,
): Promise<void> {
  await db.query(`SELECT ${ident(schema)}.set_retention($1, $2::interval, $3)`, [
    tenant,
    retention,
    retention === null,
  ]);
}

/**
 * A tenant's finished jobs, newest first by (finished_at, id): after the job `beforeId`
 * (finished in the millisecond from `before`) if given, else finished before `before` if
 * given (see finished_jobs in sql/: the last day first, every partition only when it
 * holds fewer than `limit`, on a plan the connection keeps).
 */
export async function selectFinishedJobs(
  db: PreparedQueryable,
  schema: string,
  tenant: string,
  limit: number,
  before: Date | null,
  beforeId: string | null,
): Promise<JobRow[]> {
  const { rows } = await db.query<JobRow>({
    name: `tusk_finished_${schema}`,
    text: `SELECT ${FINISHED_COLUMNS} FROM ${ident(schema)}.finished_jobs($1, $2, $3, $4)`,
    values: [tenant, limit, before, beforeId],
  });
  return rows;
}
