// Fairness under a flood: tenant A has a huge backlog and 5 slots, 50 small
// tenants have one job each and 2 slots. Measures how long the small tenants' jobs wait
// to start, and what one claim costs with A's backlog small and huge, for Tusk and for
// two alternatives on the same machine in the same run: a claim query without lanes and a
// plain global FIFO.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { mean, percentile, saveResults, serverInfo, sleep, status, statusDone } from '../lib/env.js';
import { spawnTs, stopAll } from '../lib/proc.js';
import { FIFO_CLAIM, SEED_CLAIM, SEED_SCHEMA } from '../lib/strategies.js';
import { Tusk } from '../lib/tusk.js';

export interface FairnessOptions {
  url: string;
  /** A's backlog for the flood (default 1 000 000). */
  backlog: number;
  /** A's backlog for the "small" claim-time figure (default 1 000). */
  smallBacklog: number;
  /** Small tenants, one job each. */
  tenants: number;
  /** How long a job runs. */
  jobMs: number;
  /** Worker processes, and concurrency of each. */
  processes: number;
  concurrency: number;
  /** Give up waiting for the small tenants' jobs after this long. */
  timeoutMs: number;
}

type Strategy = 'tusk' | 'seed' | 'fifo';
const LABEL: Record<Strategy, string> = { tusk: 'Tusk', seed: 'claim without lanes', fifo: 'global FIFO' };

interface Result {
  strategy: Strategy;
  started: number;
  startP50: number | null;
  startP99: number | null;
  startMax: number | null;
  claimMsSmall: number;
  claimMsLarge: number;
}

/** What differs between strategies: tables, claim statement, how to enqueue. */
interface Target {
  schema: string;
  setup(): Promise<void>;
  addBacklog(n: number): Promise<void>;
  /** A's slots full, the small tenants' jobs waiting: the state a claim is timed in. */
  prepareClaimState(): Promise<void>;
  resetClaimState(): Promise<void>;
  claimSql: string;
  enqueueSmall(tenant: string): Promise<void>;
  /** Start delay (ms) of each small tenant's job that has started. */
  smallStarts(tenants: string[]): Promise<number[]>;
  close(): Promise<void>;
}

const smallNames = (n: number) => Array.from({ length: n }, (_, i) => `s${String(i + 1).padStart(2, '0')}`);

function tuskTarget(o: FairnessOptions, pool: pg.Pool): Target {
  const schema = 'bench_fair_tusk';
  const tusk = new Tusk({ connectionString: o.url, schema, logger: false });
  const small = smallNames(o.tenants);
  return {
    schema,
    async setup() {
      await dropSchema(pool, schema);
      await tusk.migrate();
      await tusk.tenants.set('A', { slots: 5 });
      for (const t of small) await tusk.tenants.set(t, { slots: 2 });
    },
    async addBacklog(n) {
      await pool.query(
        `INSERT INTO "${schema}".jobs (tenant, task, payload)
         SELECT 'A', 'work', jsonb_build_object('ms', $2::int) FROM generate_series(1, $1)`,
        [n, o.jobMs],
      );
    },
    async prepareClaimState() {
      await pool.query(`SELECT count(*) FROM "${schema}".claim_jobs(NULL, 5, 3600000, NULL, 'A')`);
      await tusk.enqueueMany(small.map((tenant) => ({ task: 'work', payload: { ms: o.jobMs }, tenant })));
    },
    async resetClaimState() {
      await pool.query(`DELETE FROM "${schema}".jobs WHERE tenant <> 'A'`);
      await pool.query(
        `UPDATE "${schema}".jobs SET state = 'available', attempts = 0, locked_by = NULL, lease_until = NULL,
           started_at = NULL WHERE state = 'running'`,
      );
    },
    // what a worker with 16 free slots runs
    claimSql: `SELECT count(*) FROM "${schema}".claim_jobs(NULL, 16, 30000)`,
    async enqueueSmall(tenant) {
      await tusk.enqueue('work', { ms: o.jobMs }, { tenant });
    },
    async smallStarts(tenants) {
      const { rows } = await pool.query<{ ms: number }>(
        `SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM "${schema}".job_history
         WHERE tenant = ANY($1) AND started_at IS NOT NULL
         UNION ALL
         SELECT extract(epoch FROM started_at - created_at) * 1000 FROM "${schema}".jobs
         WHERE tenant = ANY($1) AND started_at IS NOT NULL`,
        [tenants],
      );
      return rows.map((r) => Number(r.ms));
    },
    close: () => tusk.close(),
  };
}

function seedLikeTarget(o: FairnessOptions, pool: pg.Pool, strategy: 'seed' | 'fifo'): Target {
  const schema = `bench_fair_${strategy}`;
  const small = smallNames(o.tenants);
  return {
    schema,
    async setup() {
      await pool.query(SEED_SCHEMA(schema));
      await pool.query(`INSERT INTO "${schema}".tenant_queues SELECT 'A', 5 UNION ALL SELECT unnest($1::text[]), 2`, [
        small,
      ]);
    },
    async addBacklog(n) {
      await pool.query(
        `INSERT INTO "${schema}".jobs (tenant_id, args)
         SELECT 'A', jsonb_build_object('ms', $2::int) FROM generate_series(1, $1)`,
        [n, o.jobMs],
      );
    },
    async prepareClaimState() {
      await pool.query(
        `UPDATE "${schema}".jobs SET status = 'running' WHERE id IN (
           SELECT id FROM "${schema}".jobs WHERE tenant_id = 'A' AND status = 'created' ORDER BY id LIMIT 5)`,
      );
      await pool.query(`INSERT INTO "${schema}".jobs (tenant_id, args) SELECT unnest($1::text[]), '{"ms": 20}'`, [
        small,
      ]);
    },
    async resetClaimState() {
      await pool.query(`DELETE FROM "${schema}".jobs WHERE tenant_id <> 'A'`);
      await pool.query(`UPDATE "${schema}".jobs SET status = 'created' WHERE status = 'running'`);
    },
    claimSql: strategy === 'seed' ? SEED_CLAIM(schema) : FIFO_CLAIM(schema),
    async enqueueSmall(tenant) {
      await pool.query(
        `INSERT INTO "${schema}".jobs (tenant_id, args) VALUES ($1, jsonb_build_object('ms', $2::int))`,
        [tenant, o.jobMs],
      );
    },
    async smallStarts(tenants) {
      const { rows } = await pool.query<{ ms: number }>(
        `SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM "${schema}".jobs
         WHERE tenant_id = ANY($1) AND started_at IS NOT NULL`,
        [tenants],
      );
      return rows.map((r) => Number(r.ms));
    },
    close: async () => {},
  };
}

/** Mean time of one claim in `client`, each in a transaction rolled back (so nothing changes). */
async function timeClaims(pool: pg.Pool, sql: string, budgetMs: number, maxRuns = 200): Promise<number> {
  const client = await pool.connect();
  const times: number[] = [];
  try {
    const deadline = performance.now() + budgetMs;
    while (times.length < maxRuns && (times.length < 3 || performance.now() < deadline)) {
      await client.query('BEGIN');
      const t0 = performance.now();
      await client.query(sql);
      times.push(performance.now() - t0);
      await client.query('ROLLBACK');
    }
  } finally {
    client.release();
  }
  return mean(times);
}

async function runStrategy(strategy: Strategy, o: FairnessOptions, pool: pg.Pool): Promise<Result> {
  const target = strategy === 'tusk' ? tuskTarget(o, pool) : seedLikeTarget(o, pool, strategy);
  const small = smallNames(o.tenants);
  const say = (what: string) => status(`fairness · ${LABEL[strategy]} · ${what}`);
  try {
    say('setting up');
    await target.setup();
    await target.addBacklog(o.smallBacklog);
    await pool.query(`VACUUM ANALYZE "${target.schema}".jobs`);
    say(`timing claims with A's backlog at ${o.smallBacklog}`);
    await target.prepareClaimState();
    const claimMsSmall = await timeClaims(pool, target.claimSql, 5000);
    await target.resetClaimState();

    say(`growing A's backlog to ${o.backlog}`);
    await target.addBacklog(o.backlog - o.smallBacklog);
    await pool.query(`VACUUM ANALYZE "${target.schema}".jobs`);
    say(`timing claims with A's backlog at ${o.backlog}`);
    await target.prepareClaimState();
    const claimMsLarge = await timeClaims(pool, target.claimSql, 5000);
    await target.resetClaimState();

    say(`starting ${o.processes} worker processes`);
    const children = Array.from({ length: o.processes }, () =>
      spawnTs(
        new URL('../workers/fairness-worker.ts', import.meta.url),
        ['--strategy', strategy, '--schema', target.schema, '--concurrency', String(o.concurrency)],
        { DATABASE_URL: o.url },
      ),
    );
    let starts: number[] = [];
    try {
      await Promise.all(children.map((c) => c.ready));
      await sleep(1000); // A floods the workers
      say(`enqueueing ${o.tenants} small tenants' jobs while A floods`);
      for (const tenant of small) {
        await target.enqueueSmall(tenant);
        await sleep(20);
      }
      const deadline = Date.now() + o.timeoutMs;
      for (;;) {
        starts = await target.smallStarts(small);
        say(`${starts.length}/${o.tenants} small tenants' jobs started`);
        if (starts.length >= small.length || Date.now() > deadline) break;
        await sleep(100);
      }
    } finally {
      await stopAll(children);
    }
    return {
      strategy,
      started: starts.length,
      startP50: percentile(starts, 50),
      startP99: percentile(starts, 99),
      startMax: starts.length ? Math.max(...starts) : null,
      claimMsSmall,
      claimMsLarge,
    };
  } finally {
    await target.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${target.schema}" CASCADE`);
    statusDone();
  }
}

const ms = (v: number | null) => (v === null ? null : v < 10 ? Number(v.toFixed(2)) : Math.round(v));

export async function fairness(o: FairnessOptions): Promise<boolean> {
  const pool = new pg.Pool({ connectionString: o.url, max: 4 });
  try {
    const results: Result[] = [];
    for (const strategy of ['tusk', 'seed', 'fifo'] as const) results.push(await runStrategy(strategy, o, pool));
    const server = await serverInfo(o.url);

    console.log(
      `\nFairness under a flood: tenant A has ${o.backlog.toLocaleString('en')} jobs waiting (5 slots); ` +
        `${o.tenants} tenants have 1 job each (2 slots); jobs take ${o.jobMs} ms; ` +
        `${o.processes} worker processes × ${o.concurrency} (PostgreSQL ${server.server_version})\n`,
    );
    const notStarted = (r: Result) =>
      r.started < o.tenants ? `${o.tenants - r.started} (> ${o.timeoutMs / 1000} s)` : '0';
    console.log(
      renderTable(
        [
          'claim strategy',
          'small job start p50 ms',
          'p99 ms',
          'max ms',
          'not started',
          `claim ms, A=${o.smallBacklog.toLocaleString('en')}`,
          `claim ms, A=${o.backlog.toLocaleString('en')}`,
          'claim ×',
        ],
        results.map((r) => [
          LABEL[r.strategy],
          ms(r.startP50),
          ms(r.startP99),
          ms(r.startMax),
          notStarted(r),
          ms(r.claimMsSmall),
          ms(r.claimMsLarge),
          Number((r.claimMsLarge / r.claimMsSmall).toFixed(2)),
        ]),
      ),
    );
    const tusk = results[0] as Result;
    const ratio = tusk.claimMsLarge / tusk.claimMsSmall;
    const p99ok = tusk.started === o.tenants && (tusk.startP99 ?? Number.POSITIVE_INFINITY) <= 100;
    console.log(
      `\nClaim time: one claim_jobs call with 16 free slots (Tusk) or the strategy's claim statement, while A's slots are full\n` +
        `and the small tenants' jobs wait; mean of up to 200 calls, each rolled back.\n\n` +
        `Goal: every small tenant's job starts within 100 ms p99 while A floods — ${p99ok ? 'met' : 'NOT met'} ` +
        `(p99 ${ms(tusk.startP99)} ms)\n` +
        `Goal: claim time at ${o.backlog.toLocaleString('en')} ≤ 1.5 × at ${o.smallBacklog.toLocaleString('en')} — ` +
        `${ratio <= 1.5 ? 'met' : 'NOT met'} (${ratio.toFixed(2)}×)`,
    );
    const file = await saveResults('fairness', { options: { ...o, url: undefined }, server, results });
    console.log(`\nresults: ${file}`);
    return p99ok && ratio <= 1.5;
  } finally {
    await pool.end();
  }
}
