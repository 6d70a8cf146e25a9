import type { PreparedQueryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import type { JobRow } from './jobColumns.js';

/** A claimed job, as the claim returns it: the job's columns a handler needs, and its lease. */
export interface ClaimedRow
  extends Pick<
    JobRow,
    | 'id'
    | 'tenant'
    | 'queue'
    | 'task'
    | 'payload'
    | 'priority'
    | 'attempts'
    | 'max_attempts'
    | 'source_type'
    | 'source_id'
    | 'source_method'
    | 'depends_on'
  > {
  /** The lease's fencing token: drawn at this claim, never handed out again. */
  lease_token: string;
  /** Milliseconds since the epoch (a number parses much faster than a timestamp). */
  created_ms: number;
  retry: unknown;
}

/** The select list giving a ClaimedRow from a row of claim_jobs or fetch_jobs. */
export const CLAIMED_COLUMNS = `id, tenant, queue, task, payload, priority, attempts, lease_token, max_attempts,
  (extract(epoch FROM created_at) * 1000)::float8 AS created_ms, retry, source_type, source_id, source_method,
  depends_on`;

export interface ClaimArgs {
  worker: number | null;
  limit: number;
  leaseMs: number;
  queues: string[] | null;
  tenant?: string | null;
  /** The claim's own transaction may commit without waiting for disk (workers). */
  asyncCommit?: boolean;
}

/** Claims up to `limit` jobs fairly across tenants (see claim_jobs in sql/). */
export async function claimJobs(db: PreparedQueryable, schema: string, args: ClaimArgs): Promise<ClaimedRow[]> {
  // a named (prepared) statement: parsed and planned once per connection
  const { rows } = await db.query<ClaimedRow>({
    name: `tusk_claim_${schema}`,
    text: `SELECT ${CLAIMED_COLUMNS} FROM ${ident(schema)}.claim_jobs($1, $2, $3, $4, $5, 64, $6)`,
    values: [args.worker, args.limit, args.leaseMs, args.queues, args.tenant ?? null, args.asyncCommit ?? false],
  });
  return rows;
}
