/**
 * The only two places where these tests lean on how the queue is stored today. Everything
 * else goes through the public API (Tusk, the CLI, the documented SQL functions).
 */
import type { Lease, LeasedJob, Worker } from '../../src/index.js';
import type { TestDb } from '../helpers.js';

/**
 * UPKEEP HOOK — update this function when upkeep moves to its own component.
 *
 * Starts what reaps expired leases and dead workers, promotes due jobs and expires old
 * ones, every `everyMs`. Today any worker of the schema does it: this one serves a queue
 * nobody enqueues to, so it runs no jobs. The caller stops it (`await upkeep.stop()`).
 */
export async function startUpkeep(db: TestDb, everyMs = 50): Promise<Worker> {
  const upkeep = db.worker({ queues: ['upkeep-only'], tasks: {}, maintenanceMs: everyMs });
  await upkeep.start();
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
