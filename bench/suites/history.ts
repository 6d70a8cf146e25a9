// History at scale (Tusk only): does a big job_history (finished jobs over 30 days of
// day partitions) and a big set of scheduled jobs slow Tusk down? Measures one claim,
// the drain rate of one default worker process, getJob and a tenant's last 100 jobs,
// on empty tables and then on full ones.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { type ClaimTimes, type Drain, drainWithWorker, timeClaims } from '../lib/drain.js';
import { mean, percentile, saveResults, serverInfo, status, statusDone } from '../lib/env.js';
import { Tusk } from '../lib/tusk.js';

export interface HistoryOptions {
  url: string;
  /** Rows put in job_history, finished over the last `days` days (default 10 000 000). */
  history: number;
  /** Scheduled jobs waiting in jobs, due over the next 30 days (default 1 000 000). */
  scheduled: number;
  /** Tenants the history is spread over (default 1 000). */
  tenants: number;
  /** Days of history, one partition each (default 30). */
  days: number;
  /** Jobs drained in each case (default 50 000). */
  drain: number;
  /** Claims timed per case (default 50). */
  claims: number;
  /** getJob calls and last-100 queries timed per case (default 500 each). */
  lookups: number;
}

interface Lookups {
  p50: number;
  p95: number;
  max: number;
}

interface CaseResult extends Drain {
  name: string;
  historyRows: number;
  scheduledJobs: number;
  partitions: number;
  claimMsMean: number;
  claimMsP50: number;
  getJob: Lookups;
  last100: Lookups;
}

/** The full case's schema; the empty case has its own, so that their claims can alternate. */
const SCHEMA = 'bench_history';
const EMPTY_SCHEMA = 'bench_history_empty';
const DRAIN_TIMEOUT_MS = 600_000;
const DAY_MS = 24 * 3600_000;
/** Goals: drain and claim within 10 % of the empty tables', lookups under 5 ms. */
const GOAL_RATIO = 0.1;
const GOAL_LOOKUP_MS = 5;

async function count(pool: pg.Pool, sql: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(sql);
  return Number(rows[0]?.n ?? 0);
}

/** Fills job_history (day partitions first, so rows go straight into them) and the scheduled jobs. */
async function fill(pool: pg.Pool, o: HistoryOptions, say: (line: string) => void): Promise<void> {
  say(`creating ${o.days} day partitions`);
  await pool.query(
    `SELECT "${SCHEMA}".create_history_partition(((now() AT TIME ZONE 'UTC')::date - d)::date)
     FROM generate_series(0, $1::int) d`,
    [o.days],
  );
  // in chunks of a million: one transaction per chunk, progress shown
  const chunk = 1_000_000;
  for (let from = 0; from < o.history; from += chunk) {
    const n = Math.min(chunk, o.history - from);
    say(`job_history ${from.toLocaleString('en')}/${o.history.toLocaleString('en')}`);
    // ids in finish order; finished_at spread evenly over the days; tenants round-robin
    await pool.query(
      `INSERT INTO "${SCHEMA}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
         max_attempts, concurrency_key, created_at, run_at, started_at, finished_at, wait_ms, run_ms, result)
       SELECT g, 't' || (g % $3), 'default', 'noop', jsonb_build_object('n', g), 0, 'succeeded', 1, 5, '',
              f - interval '5 ms', f - interval '5 ms', f - interval '1 ms', f, 4, 1, '{"ok": true}'
       FROM (SELECT g, now() - ($4::bigint - g) * ($5::float8 / $4) * interval '1 millisecond' AS f
             FROM generate_series($1::bigint + 1, $1::bigint + $2) g) h`,
      [from, n, o.tenants, o.history, o.days * DAY_MS],
    );
  }
  say(`${o.scheduled.toLocaleString('en')} scheduled jobs`);
  await pool.query(
    `INSERT INTO "${SCHEMA}".jobs (id, tenant, task, payload, state, run_at)
     SELECT $1::bigint + g, 't' || (g % $3), 'noop', jsonb_build_object('n', g), 'scheduled',
            now() + interval '1 hour' + random() * interval '30 days'
     FROM generate_series(1, $2::int) g`,
    [o.history, o.scheduled, o.tenants],
  );
  // new jobs get ids after these, as they would have
  await pool.query(`ALTER TABLE "${SCHEMA}".jobs ALTER COLUMN id RESTART WITH ${o.history + o.scheduled + 1}`);
  say('VACUUM ANALYZE');
  await pool.query(`VACUUM ANALYZE "${SCHEMA}".job_history`);
  await pool.query(`VACUUM ANALYZE "${SCHEMA}".jobs`);
}

const summary = (times: number[]): Lookups => ({
  p50: percentile(times, 50) ?? Number.NaN,
  p95: percentile(times, 95) ?? Number.NaN,
  max: Math.max(...times),
});

/** Times `n` calls of `call(i)` through the API, after a few unmeasured ones. */
async function timeCalls(n: number, call: (i: number) => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 5; i++) await call(i);
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call(i);
    times.push(performance.now() - t0);
  }
  return times;
}

/** Replaces the schema's unscheduled jobs by a backlog of `n` new ones. */
async function fillBacklog(pool: pg.Pool, schema: string, n: number): Promise<void> {
  await pool.query(`DELETE FROM "${schema}".jobs WHERE state <> 'scheduled'`);
  await pool.query(
    `INSERT INTO "${schema}".jobs (task, payload) SELECT 'noop', jsonb_build_object('n', g)
     FROM generate_series(1, $1::int) g`,
    [n],
  );
  await pool.query(`VACUUM ANALYZE "${schema}".jobs`);
}

/** A case's drain and lookups; its claims are timed apart, alternating with the other case's. */
async function runCase(
  o: HistoryOptions,
  pool: pg.Pool,
  name: string,
  schema: string,
): Promise<Omit<CaseResult, 'claimMsMean' | 'claimMsP50'>> {
  const say = (what: string) => status(`history · ${name} · ${what}`);
  say('filling the backlog');
  await fillBacklog(pool, schema, o.drain);
  // both cases drain from a checkpointed state: otherwise the fill's gigabytes of WAL are
  // still being checkpointed (and every page's first change logged whole) during the drain
  await pool.query('CHECKPOINT');
  const drain = await drainWithWorker(o.url, schema, o.drain, DRAIN_TIMEOUT_MS, say);

  say('timing getJob and last-100 queries');
  // ids to look up: half among the jobs just drained, half anywhere in the history
  const { rows } = await pool.query<{ lo: string; hi: string }>(
    `SELECT min(id)::text AS lo, max(id)::text AS hi FROM "${schema}".job_history`,
  );
  const [lo, hi] = [Number(rows[0]?.lo), Number(rows[0]?.hi)];
  const ids = Array.from({ length: o.lookups + 5 }, (_, i) =>
    String(Math.floor(i % 2 ? hi - Math.random() * o.drain : lo + Math.random() * (hi - lo))),
  );
  const tusk = new Tusk({ connectionString: o.url, schema, logger: false, maxConnections: 2 });
  try {
    const getJob = await timeCalls(o.lookups, (i) => tusk.getJob(ids[i] as string));
    const last100 = await timeCalls(o.lookups, (i) =>
      tusk.finishedJobs({ tenant: i % 2 ? 'default' : `t${i % o.tenants}`, limit: 100 }),
    );
    return {
      name,
      historyRows: await count(pool, `SELECT count(*) AS n FROM "${schema}".job_history`),
      scheduledJobs: await count(pool, `SELECT count(*) AS n FROM "${schema}".jobs WHERE state = 'scheduled'`),
      partitions: await count(
        pool,
        `SELECT count(*) AS n FROM pg_inherits WHERE inhparent = '"${schema}".job_history'::regclass`,
      ),
      getJob: summary(getJob),
      last100: summary(last100),
      ...drain,
    };
  } finally {
    await tusk.close();
  }
}

const fixed = (v: number) => (v < 10 ? Number(v.toFixed(2)) : Math.round(v));

export async function history(o: HistoryOptions): Promise<boolean> {
  const pool = new pg.Pool({ connectionString: o.url, max: 4 });
  try {
    status('history · setting up');
    for (const schema of [EMPTY_SCHEMA, SCHEMA]) {
      await dropSchema(pool, schema);
      const tusk = new Tusk({ connectionString: o.url, schema, logger: false });
      await tusk.migrate();
      await tusk.close();
    }
    const emptyCase = await runCase(o, pool, 'empty', EMPTY_SCHEMA);
    const t0 = performance.now();
    await fill(pool, o, (line) => status(`history · filling · ${line}`));
    const fillMs = performance.now() - t0;
    const fullCase = await runCase(o, pool, 'full', SCHEMA);
    status(`history · timing ${o.claims} claims in each case, alternating`);
    await fillBacklog(pool, EMPTY_SCHEMA, o.drain);
    await fillBacklog(pool, SCHEMA, o.drain);
    const [emptyClaims, fullClaims] = await timeClaims(pool, [EMPTY_SCHEMA, SCHEMA], o.claims);
    const claimStats = (t: ClaimTimes | undefined) => ({
      claimMsMean: t ? mean(t.times) : Number.NaN,
      claimMsP50: (t && percentile(t.times, 50)) ?? Number.NaN,
    });
    const empty: CaseResult = { ...emptyCase, ...claimStats(emptyClaims) };
    const full: CaseResult = { ...fullCase, ...claimStats(fullClaims) };
    const server = await serverInfo(o.url);

    console.log(
      `\nHistory: one Tusk worker process (defaults) draining ${o.drain.toLocaleString('en')} jobs, one ` +
        `claim_jobs(NULL, 500, 30000) call, getJob and a tenant's last 100 finished jobs (through the API), ` +
        `on empty tables, then with ${o.history.toLocaleString('en')} finished jobs over ${o.days} day ` +
        `partitions and ${o.scheduled.toLocaleString('en')} scheduled jobs (filled in ${(fillMs / 1000).toFixed(0)} s; ` +
        `PostgreSQL ${server.server_version})\n`,
    );
    const results = [empty, full];
    console.log(
      renderTable(
        [
          'tables',
          'history rows',
          'scheduled',
          'partitions',
          'claim ms (mean)',
          'drain jobs/s',
          'from first job',
          'getJob p50',
          'getJob p95',
          'last-100 p50',
          'last-100 p95',
        ],
        results.map((r) => [
          r.name,
          r.historyRows,
          r.scheduledJobs,
          r.partitions,
          fixed(r.claimMsMean),
          fixed(r.drainRate),
          fixed(r.drainRateRunning),
          fixed(r.getJob.p50),
          fixed(r.getJob.p95),
          fixed(r.last100.p50),
          fixed(r.last100.p95),
        ]),
      ),
    );
    const claimRatio = full.claimMsMean / empty.claimMsMean;
    const drainRatio = full.drainRateRunning / empty.drainRateRunning;
    const goals: Array<[string, boolean]> = [
      [
        `claim time ${claimRatio.toFixed(2)}× the empty tables' (goal ≤ ${1 + GOAL_RATIO})`,
        claimRatio <= 1 + GOAL_RATIO,
      ],
      [
        `drain rate ${drainRatio.toFixed(2)}× the empty tables' (from the first job; goal ≥ ${1 - GOAL_RATIO})`,
        drainRatio >= 1 - GOAL_RATIO,
      ],
      [
        `getJob p95 ${fixed(full.getJob.p95)} ms, last-100 p95 ${fixed(full.last100.p95)} ms (goal < ${GOAL_LOOKUP_MS} ms)`,
        full.getJob.p95 < GOAL_LOOKUP_MS && full.last100.p95 < GOAL_LOOKUP_MS,
      ],
    ];
    console.log();
    for (const [line, ok] of goals) console.log(`${ok ? 'met   ' : 'MISSED'}  ${line}`);
    console.log(
      `\nClaims: ${o.claims} calls in each case after one unmeasured one, alternating between the cases (both tables in place, each with a backlog of ${o.drain.toLocaleString('en')}), each in a transaction rolled back, after one committed take-up of the backlog. Lookups: ` +
        `${o.lookups} of each, half of recent jobs (drained) and half of any history row; last-100 alternates ` +
        `the drained tenant with the history's ${o.tenants} tenants.`,
    );
    const file = await saveResults('history', { options: { ...o, url: undefined }, server, fillMs, results, goals });
    console.log(`\nresults: ${file}`);
    return goals.every(([, ok]) => ok);
  } finally {
    statusDone();
    for (const schema of [EMPTY_SCHEMA, SCHEMA]) await dropSchema(pool, schema).catch(() => {});
    await pool.end();
  }
}
