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
 * Claims up to `want` jobs. Queues of equal weight (or all queues) are claimed together;
 * with different weights the slots are split by weighted sampling and claimed queue by
 * queue, a queue that comes up short passing its remainder on to the next (and the last
 * one's to the queues that filled theirs).
 */
export async function claimByWeight(pool: pg.Pool, schema: string, c: WeightedClaim): Promise<ClaimedRow[]> {
  const claim = (queues: string[] | null, limit: number) =>
    claimJobs(pool, schema, { worker: c.worker, limit, leaseMs: c.leaseMs, queues, asyncCommit: true });
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
