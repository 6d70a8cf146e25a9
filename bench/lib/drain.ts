// Shared by the scaling and history suites: timing claim_jobs calls, and draining jobs
// with one Tusk worker process (its defaults).
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { statusDone } from './env.js';
import { type FinalReport, startPeerWorker } from './peer-child.js';

/** Claims timed by `timeClaims` in one schema, and the one take-up of the jobs inserted before them. */
export interface ClaimTimes {
  /**
   * The first claim after a bulk insert takes the new jobs' (queue, tenant) pairs up once
   * (it reads every arrival); committed here, so the timed claims, rolled back, do not
   * each repeat it.
   */
  takeUpMs: number;
  times: number[];
}

/**
 * Times `n` calls of claim_jobs(NULL, 500, 30000) in each schema, each in a transaction
 * rolled back (the backlog stays), one connection per schema. With several schemas the
 * calls alternate between them, so that what the server is doing meanwhile (its caches,
 * a checkpoint, autovacuum) weighs on each alike: timed one case after the other, the
 * same claim differed by 20 % between runs.
 */
export async function timeClaims(pool: pg.Pool, schemas: readonly string[], n: number): Promise<ClaimTimes[]> {
  const clients = await Promise.all(schemas.map(() => pool.connect()));
  try {
    const results: ClaimTimes[] = [];
    for (const [k, schema] of schemas.entries()) {
      const t0 = performance.now();
      await clients[k]?.query(`SELECT "${schema}".ready_pairs(NULL, NULL)`);
      results.push({ takeUpMs: performance.now() - t0, times: [] });
    }
    // one unmeasured round first: the sessions' plans are built on their first call
    for (let i = -1; i < n; i++) {
      for (const [k, schema] of schemas.entries()) {
        const client = clients[k] as pg.PoolClient;
        await client.query('BEGIN');
        const t1 = performance.now();
        await client.query(`SELECT count(*) FROM "${schema}".claim_jobs(NULL, 500, 30000)`);
        if (i >= 0) results[k]?.times.push(performance.now() - t1);
        await client.query('ROLLBACK');
      }
    }
    return results;
  } finally {
    for (const client of clients) client.release();
  }
}

/** A drain by one worker process. */
export interface Drain {
  drained: number;
  drainMs: number;
  /** Worker start to first job start: connecting, registering, the first claim. */
  firstJobMs: number;
  /** Jobs per second from the worker's start. */
  drainRate: number;
  /** Jobs per second from the first job's start. */
  drainRateRunning: number;
  capped: boolean;
  rssPeakMb: number;
}

/** Drains `target` jobs of `schema` with one Tusk worker process (defaults); `say` shows progress. */
export async function drainWithWorker(
  url: string,
  schema: string,
  target: number,
  timeoutMs: number,
  say: (line: string) => void,
): Promise<Drain> {
  const child = startPeerWorker({ system: 'tusk', mode: 'defaults', schema, target, maxMs: timeoutMs }, url);
  const tick = setInterval(
    () => say(`drain ${child.handled.toLocaleString('en')}/${target.toLocaleString('en')}`),
    500,
  );
  let final: FinalReport;
  try {
    await child.ready;
    await child.drained;
  } finally {
    clearInterval(tick);
    final = await child.stop();
    statusDone();
  }
  if (final.done === null || final.ms === null) throw new Error('the worker reported no drain');
  const firstJobMs = final.firstJobMs ?? 0;
  return {
    drained: final.done,
    drainMs: final.ms,
    firstJobMs,
    drainRate: (final.done / final.ms) * 1000,
    drainRateRunning: (final.done / (final.ms - firstJobMs)) * 1000,
    capped: final.capped,
    rssPeakMb: final.rssPeakMb,
  };
}
