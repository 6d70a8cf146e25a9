// The lane flood: one tenant enqueues jobs with distinct concurrency keys (150 000 by
// default); how long does another tenant's fetch of one job take, and a fetch for any
// tenant? Each fetch is timed inside a transaction that is rolled back, so every one
// finds the same queue.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { mean, percentile, saveResults, serverInfo, status, statusDone } from '../lib/env.js';
import { Tusk } from '../lib/tusk.js';

export interface LanesOptions {
  url: string;
  /** Distinct keys the flooding tenant enqueues. */
  keys: number;
  /** Fetches timed per case. */
  fetches: number;
}

const SCHEMA = 'bench_lanes';
/** Goal: another tenant's fetch with the flood ≤ 2× without it. */
const GOAL = 2;

interface Case {
  fetch: string;
  without: number;
  withFlood: number;
  p95With: number;
}

async function timeFetch(pool: pg.Pool, tenant: string | null, n: number): Promise<number[]> {
  const c = await pool.connect();
  const times: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      await c.query('BEGIN');
      const t = performance.now();
      const { rows } = await c.query(`SELECT id FROM "${SCHEMA}".fetch_jobs(1, 30000, 'lanes', $1)`, [tenant]);
      times.push(performance.now() - t);
      await c.query('ROLLBACK');
      if (rows.length !== 1) throw new Error(`lanes: a fetch for ${tenant ?? 'any tenant'} found no job`);
    }
  } finally {
    c.release();
  }
  return times;
}

/**
 * The look any committed claim takes at the jobs that arrived since the previous one (the
 * fetches below are rolled back, so none of them would keep it). Returns its time.
 */
async function takeUp(pool: pg.Pool): Promise<number> {
  const t = performance.now();
  await pool.query(`SELECT "${SCHEMA}".ready_pairs(NULL, NULL)`);
  return performance.now() - t;
}

export async function lanes(o: LanesOptions): Promise<boolean> {
  const pool = new pg.Pool({ connectionString: o.url, max: 2 });
  const tusk = new Tusk({ connectionString: o.url, schema: SCHEMA, logger: false });
  try {
    status('lanes · setting up');
    await dropSchema(pool, SCHEMA);
    await tusk.migrate();
    // the victims: a few tenants with a job each waiting
    await tusk.enqueueMany(
      Array.from({ length: 10 }, (_, k) => ({ task: 'work', tenant: `victim${k}`, queue: 'lanes' })),
    );
    await pool.query(`ANALYZE "${SCHEMA}".jobs`);
    await takeUp(pool);
    const before = { own: await timeFetch(pool, 'victim0', o.fetches), any: await timeFetch(pool, null, o.fetches) };

    for (let k = 0; k < o.keys; k += 10_000) {
      status(`lanes · flooding ${k.toLocaleString('en')} / ${o.keys.toLocaleString('en')} keys`);
      const n = Math.min(10_000, o.keys - k);
      await tusk.enqueueMany(
        Array.from({ length: n }, (_, i) => ({
          task: 'flood',
          tenant: 'flooder',
          queue: 'lanes',
          concurrencyKey: `key-${k + i}`,
        })),
      );
    }
    await pool.query(`ANALYZE "${SCHEMA}".jobs`);
    const takeUpMs = await takeUp(pool);
    status('lanes · timing fetches with the flood');
    const after = { own: await timeFetch(pool, 'victim0', o.fetches), any: await timeFetch(pool, null, o.fetches) };
    // the flooder with a per-key limit (a committed row: each fetch is rolled back). Never served
    // and first by name, it comes first in turn: a fetch for any tenant reads its keys
    await tusk.tenants.set('flooder', { perKey: 1 });
    const keyed = { own: await timeFetch(pool, 'victim0', o.fetches), any: await timeFetch(pool, null, o.fetches) };
    statusDone();

    const row = (fetch: string, without: number[], withFlood: number[]): Case => ({
      fetch,
      without: mean(without),
      withFlood: mean(withFlood),
      p95With: percentile(withFlood, 95) ?? 0,
    });
    const cases = [
      row("another tenant's fetch of one job", before.own, after.own),
      row('a fetch for any tenant', before.any, after.any),
      row("another tenant's fetch, flooder with perKey 1", before.own, keyed.own),
      row('a fetch for any tenant, the flooder first in turn with perKey 1 (reads its keys)', before.any, keyed.any),
    ];
    const server = await serverInfo(o.url);
    const ratio = cases[0] ? cases[0].withFlood / cases[0].without : Number.POSITIVE_INFINITY;
    const met = ratio <= GOAL;
    console.log(
      [
        `Lane flood: one tenant with ${o.keys.toLocaleString('en')} jobs of distinct concurrency keys waiting, 10 other tenants with one job each; mean of ${o.fetches} fetches per case, each rolled back (PostgreSQL ${server.server_version})`,
        '',
        renderTable(
          ['fetch', 'ms without the flood', 'ms with it', 'p95 ms with it', '×'],
          cases.map((c) => [
            c.fetch,
            c.without.toFixed(2),
            c.withFlood.toFixed(2),
            c.p95With.toFixed(2),
            (c.withFlood / c.without).toFixed(2),
          ]),
        ),
        '',
        `Taking up the flood once (the first committed claim after it reads its arrivals): ${takeUpMs.toFixed(0)} ms`,
        `Goal: another tenant's fetch with the flood ≤ ${GOAL}× without it — ${met ? 'met' : 'NOT met'} (${ratio.toFixed(2)}×)`,
      ].join('\n'),
    );
    await saveResults('lanes', { options: o, server, cases, takeUpMs, goal: { ratio, met } });
    return met;
  } finally {
    await dropSchema(pool, SCHEMA).catch(() => {});
    await tusk.close();
    await pool.end();
  }
}
