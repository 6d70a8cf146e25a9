/**
 * The only two places where these tests lean on how the queue is stored today. Everything
 * else goes through the public API (Tusk, the CLI, the documented SQL functions).
 */
import type { Lease, LeasedJob, Upkeep } from '../../src/index.js';
import type { TestDb } from '../helpers.js';

/**
 * UPKEEP HOOK
 *
 * Starts the queue's upkeep (reaps expired leases and dead workers, promotes due jobs,
 * expires old ones) every `everyMs`, with no worker. The caller stops it
 * (`await upkeep.stop()`).
 */
export async function startUpkeep(db: TestDb, everyMs = 50): Promise<Upkeep> {
  const upkeep = db.tusk.upkeep({ everyMs });
  upkeep.start();
  return upkeep;
}

/**
 * LEASE HOOK — update these two when the fencing token changes shape.
 *
 * The documented SQL functions take a lease as (job id, token): `ack_job(id, token,
 * result)`, `nack_job(id, token, delay_ms, error)`, `extend_lease(id, token, ms)`.
 * `sqlToken` is the token of a lease returned by `tusk.fetch()`; `rowToken` the token of
 * a row returned by the SQL function `fetch_jobs`: its lease_token, drawn at each claim.
 */
export const sqlToken = (lease: LeasedJob | Lease): unknown => lease.token;
export const rowToken = (row: Record<string, unknown>): unknown => row.lease_token;
