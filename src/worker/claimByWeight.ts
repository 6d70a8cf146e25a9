import type pg from 'pg';
import { equalWeights, sampleOrder, splitByWeight } from '../policies/weights.js';
import { type ClaimedRow, claimJobs } from '../queries/claimJobs.js';
import { queueNames, type ResolvedWorkerOptions } from './options.js';

/** One claim of a worker: who claims, how many jobs, for how long, from which queues (null: all). */
export interface WeightedClaim {
  worker: number;
  want: number;
  leaseMs: number;
  queues: ResolvedWorkerOptions['queues'];
}

/**
 * Claims as `claimWeighted` does, in a transaction committed once the jobs are in hand.
 * A claim statement on its own committed when it ended, whether or not its answer could
 * still reach the worker: one whose connection was cut while it ran (the server sees the
 * client gone only when it sends the answer, after the commit) leased its jobs to a worker
 * that never saw them, and they waited for the lease to run out. Now such a claim is rolled
 * back when the server finds the connection gone; only a cut in the COMMIT's own round
 * trip leaves the outcome unknown. Two more round trips a claim.
 */
export async function claimByWeight(pool: pg.Pool, schema: string, c: WeightedClaim): Promise<ClaimedRow[]> {
  const client = await pool.connect();
  let rows: ClaimedRow[];
  try {
    await client.query('BEGIN');
    rows = await claimWeighted(client, schema, c);
    await client.query('COMMIT');
  } catch (error) {
    // a connection that cannot even roll back is dropped (the server rolls back for it)
    const usable = await client.query('ROLLBACK').then(
      () => true,
      () => false,
    );
    client.release(usable ? undefined : (error as Error));
    throw error;
  }
  client.release();
  return rows;
}

/**
 * Claims up to `want` jobs, on `db` (the caller's transaction). Queues of equal weight (or all queues) are claimed together;
 * with different weights the slots are split by weighted sampling and claimed queue by
 * queue, a queue that comes up short passing its remainder on to the next (and the last
 * one's to the queues that filled theirs).
 */
async function claimWeighted(db: pg.PoolClient, schema: string, c: WeightedClaim): Promise<ClaimedRow[]> {
  const claim = (queues: string[] | null, limit: number) =>
    claimJobs(db, schema, { worker: c.worker, limit, leaseMs: c.leaseMs, queues, asyncCommit: true });
  const queues = c.queues;
  if (!queues || equalWeights(queues)) return claim(queueNames(queues), c.want);
  const split = splitByWeight(queues, c.want);
  const asked = new Set(split.map(([q]) => q));
  const rest = sampleOrder(queues.filter(([q]) => !asked.has(q))).map((q): [string, number] => [q, 0]);
  const batches: ClaimedRow[][] = [];
  const full: string[] = [];
  let carry = 0;
  for (const [queue, share] of [...split, ...rest]) {
    const limit = share + carry;
    if (limit === 0) continue;
    const got = await claim([queue], limit);
    batches.push(got);
    carry = limit - got.length;
    if (carry === 0) full.push(queue);
  }
  // the last queue came up short: what it left goes to the queues that filled their share
  if (carry > 0 && full.length > 0) batches.push(await claim(full, carry));
  return interleave(batches);
}

/**
 * Merges per-queue batches so that each queue's jobs are spread over the whole run in
 * proportion (800 critical and 100 default: a default job after every 8 critical ones),
 * each batch keeping its own order.
 */
function interleave(batches: ClaimedRow[][]): ClaimedRow[] {
  if (batches.length < 2) return batches[0] ?? [];
  return batches
    .flatMap((batch) => batch.map((row, i) => ({ row, at: (i + 0.5) / batch.length })))
    .sort((a, b) => a.at - b.at)
    .map((x) => x.row);
}
