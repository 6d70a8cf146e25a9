// Scaling (Tusk only): does a large backlog slow Tusk down? With a large job_history
// already in place, measures one claim and the drain rate of one default worker process
// with a small backlog waiting, then with a huge one.
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { type Drain, drainWithWorker, timeClaims } from '../lib/drain.js';
import { mean, percentile, saveResults, serverInfo, status, statusDone } from '../lib/env.js';
import { Tusk } from '../lib/tusk.js';

export interface ScalingOptions {
  url: string;
  /** The small backlog (default 10 000). */
  small: number;
  /** The large backlog (default 1 000 000). */
  large: number;
  /** Rows put in job_history before anything (default 1 000 000). */
  history: number;
  /** Jobs drained in each case, at most the backlog (default 50 000). */
  drain: number;
  /** Claims timed per case (default 50). */
  claims: number;
}

interface CaseResult extends Drain {
  backlog: number;
  historyRows: number;
  claimMsMean: number;
  claimMsP50: number;
  claimMsAll: number[];
  takeUpMs: number;
}

const SCHEMA = 'bench_scaling';
const DRAIN_TIMEOUT_MS = 600_000;

async function insertHistory(pool: pg.Pool, n: number): Promise<void> {
  // finished in the last day: today's and yesterday's daily partitions (or the default one)
  await pool.query(
    `INSERT INTO "${SCHEMA}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
       max_attempts, concurrency_key, created_at, run_at, started_at, finished_at, wait_ms, run_ms)
     SELECT g, 'default', 'default', 'noop', jsonb_build_object('n', g), 0, 'succeeded', 1, 5, '',
            f - interval '5 ms', f - interval '5 ms', f - interval '1 ms', f, 4, 1
     FROM (SELECT g, now() - floor(random() * 1440) * interval '1 minute' AS f
           FROM generate_series(1, $1::int) g) h`,
    [n],
  );
  // new jobs get ids after the history's, as they would have
  await pool.query(`ALTER TABLE "${SCHEMA}".jobs ALTER COLUMN id RESTART WITH ${n + 1}`);
  await pool.query(`VACUUM ANALYZE "${SCHEMA}".job_history`);
}

async function runCase(o: ScalingOptions, pool: pg.Pool, backlog: number): Promise<CaseResult> {
  const say = (what: string) => status(`scaling · backlog ${backlog.toLocaleString('en')} · ${what}`);
  say('filling the backlog');
  await pool.query(`TRUNCATE "${SCHEMA}".jobs`);
  await pool.query(
    `INSERT INTO "${SCHEMA}".jobs (task, payload) SELECT 'noop', jsonb_build_object('n', g)
     FROM generate_series(1, $1::int) g`,
    [backlog],
  );
  await pool.query(`VACUUM ANALYZE "${SCHEMA}".jobs`);
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${SCHEMA}".job_history`);
  const historyRows = Number(rows[0]?.n);

  say(`timing ${o.claims} claims`);
  const [timed] = await timeClaims(pool, [SCHEMA], o.claims);
  if (!timed) throw new Error('no claims timed');
  const { takeUpMs, times: claims } = timed;
  // the rolled-back claims left dead row versions behind
  await pool.query(`VACUUM ANALYZE "${SCHEMA}".jobs`);

  const drain = await drainWithWorker(o.url, SCHEMA, Math.min(o.drain, backlog), DRAIN_TIMEOUT_MS, say);
  return {
    backlog,
    historyRows,
    claimMsMean: mean(claims),
    claimMsP50: percentile(claims, 50) ?? Number.NaN,
    claimMsAll: claims.map((t) => Number(t.toFixed(3))),
    takeUpMs,
    ...drain,
  };
}

const fixed = (v: number) => (v < 10 ? Number(v.toFixed(2)) : Math.round(v));

export async function scaling(o: ScalingOptions): Promise<void> {
  const pool = new pg.Pool({ connectionString: o.url, max: 4 });
  const tusk = new Tusk({ connectionString: o.url, schema: SCHEMA, logger: false });
  try {
    status('scaling · setting up');
    await dropSchema(pool, SCHEMA);
    await tusk.migrate();
    await tusk.close();
    status(`scaling · ${o.history.toLocaleString('en')} rows into job_history`);
    await insertHistory(pool, o.history);
    const results: CaseResult[] = [];
    for (const backlog of [o.small, o.large]) results.push(await runCase(o, pool, backlog));
    const server = await serverInfo(o.url);

    console.log(
      `\nScaling: one Tusk worker process (defaults) and one claim_jobs(NULL, 500, 30000) call, with a small ` +
        `and a large backlog; ${o.history.toLocaleString('en')} rows in job_history first ` +
        `(PostgreSQL ${server.server_version})\n`,
    );
    console.log(
      renderTable(
        [
          'jobs waiting',
          'job_history rows',
          'take-up ms (once)',
          'claim ms (mean)',
          'claim ms (p50)',
          'drained',
          'first job ms',
          'drain jobs/s',
          'from first job',
        ],
        results.map((r) => [
          r.backlog,
          r.historyRows,
          fixed(r.takeUpMs),
          fixed(r.claimMsMean),
          fixed(r.claimMsP50),
          r.drained,
          fixed(r.firstJobMs),
          fixed(r.drainRate),
          fixed(r.drainRateRunning),
        ]),
      ),
    );
    const [small, large] = results as [CaseResult, CaseResult];
    console.log(
      `\nlarge ÷ small: claim time ${(large.claimMsMean / small.claimMsMean).toFixed(2)}×, ` +
        `drain rate ${(large.drainRate / small.drainRate).toFixed(2)}× ` +
        `(from the first job: ${(large.drainRateRunning / small.drainRateRunning).toFixed(2)}×)\n` +
        `Claims: ${o.claims} calls after one unmeasured one, each in a transaction rolled back, after one ` +
        `committed take-up of the backlog's (queue, tenant) pairs (what the first claim after a bulk enqueue does once). ` +
        `Drain: min(${o.drain.toLocaleString('en')}, backlog) jobs, the rest of the backlog still waiting, ` +
        `timed from the worker's start (or its first job's) until the store shows them finished.`,
    );
    const file = await saveResults('scaling', { options: { ...o, url: undefined }, server, results });
    console.log(`\nresults: ${file}`);
  } finally {
    statusDone();
    await tusk.close().catch(() => {});
    await dropSchema(pool, SCHEMA).catch(() => {});
    await pool.end();
  }
}
