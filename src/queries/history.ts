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

/** How far back the first, cheap look at a tenant's finished jobs goes. */
const RECENT_MS = 24 * 3600_000;

/**
 * A tenant's finished jobs, newest first, finished before `before` if given. First the
 * last day before `before` (or now): its one or two day partitions, pruned at execution,
 * hold the newest `limit` jobs of any busy tenant. Only when they hold fewer, every
 * partition (before `before`): one probe of job_history_tenant (tenant, finished_at
 * DESC) each. Prepared statements, one per form: planning over every day partition costs
 * more than running the query.
 */
export async function selectFinishedJobs(
  db: PreparedQueryable,
  schema: string,
  tenant: string,
  limit: number,
  before: Date | null,
): Promise<JobRow[]> {
  const since = new Date((before ?? new Date()).getTime() - RECENT_MS);
  const recent = await finishedJobs(db, schema, tenant, limit, before, since);
  if (recent.length >= limit) return recent;
  return finishedJobs(db, schema, tenant, limit, before, null);
}

async function finishedJobs(
  db: PreparedQueryable,
  schema: string,
  tenant: string,
  limit: number,
  before: Date | null,
  since: Date | null,
): Promise<JobRow[]> {
  const values: unknown[] = [tenant, limit];
  const bounds: string[] = [];
  if (before) bounds.push(`AND finished_at < $${values.push(before)}`);
  if (since) bounds.push(`AND finished_at >= $${values.push(since)}`);
  const { rows } = await db.query<JobRow>({
    name: `tusk_finished_${before ? 'before_' : ''}${since ? 'since_' : ''}${schema}`,
    text: `SELECT ${FINISHED_COLUMNS} FROM ${ident(schema)}.job_history
           WHERE tenant = $1 ${bounds.join(' ')}
           ORDER BY finished_at DESC LIMIT $2`,
    values,
  });
  return rows;
}
