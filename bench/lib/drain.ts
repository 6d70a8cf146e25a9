// Shared by the scaling and history suites: timing claim_jobs calls, and draining jobs
// with one Tusk worker process (its defaults).
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { statusDone } from './env.js';
import { type FinalReport, startPeerWorker } from './peer-child.js';

/** Times `n` calls of claim_jobs(NULL, 500, 30000), each in a transaction rolled back. */
/** Claims timed by `timeClaims`, and the one take-up of the jobs inserted before them. */
export interface ClaimTimes {
  /**
   * The first claim after a bulk insert takes the new jobs' (queue, tenant) pairs up once
   * (it reads every arrival); committed here, so the timed claims, rolled back, do not
   * each repeat it.
   */
  takeUpMs: number;
  times: number[];
}

/** Times `n` claims of 500 jobs, each in a transaction rolled back (the backlog stays). */
export async function timeClaims(pool: pg.Pool, schema: string, n: number): Promise<ClaimTimes> {
  const client = await pool.connect();
  const sql = `SELECT count(*) FROM "${schema}".claim_jobs(NULL, 500, 30000)`;
  const times: number[] = [];
  try {
    const t0 = performance.now();
    await client.query(`SELECT "${schema}".ready_pairs(NULL, NULL)`);
    const takeUpMs = performance.now() - t0;
    // one unmeasured call first: the session's plans are built on the first call
    for (let i = -1; i < n; i++) {
      await client.query('BEGIN');
      const t1 = performance.now();
      await client.query(sql);
      if (i >= 0) times.push(performance.now() - t1);
      await client.query('ROLLBACK');
    }
    return { takeUpMs, times };
  } finally {
    client.release();
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
