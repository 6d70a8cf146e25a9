// The pinned horizon, measured in isolation: a session holds a transaction id open (an
// idle transaction, a forgotten BEGIN), so no row version killed after it began can be
// removed; meanwhile jobs are enqueued and drained through claim_jobs and finish_jobs.
// How does one claim's time grow with the jobs handled since the pin? Printed per
// checkpoint, for tenants without limits (claims in parallel) and with a slot limit (claims
// serialized, running jobs counted). A queue that walks what it killed grows linearly.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { mean, percentile, saveResults, serverInfo, status, statusDone } from '../lib/env.js';
import { Tusk } from '../lib/tusk.js';

export interface PinnedOptions {
  url: string;
  /** Jobs handled while the horizon is pinned, per case. */
  jobs: number;
  /** Jobs per claim. */
  batch: number;
  /** Checkpoints the run is cut into. */
  checkpoints: number;
}

const SCHEMA = 'bench_pinned';
const TENANTS = 4;
/** Jobs enqueued, then drained, at a time. */
const PER_ROUND = 2000;
/** Goal: a claim at the end of the pin ≤ 2× a claim before it. */
const GOAL = 2;
/** The upkeep's pass, every 500 ms as a worker runs it by default. */
const UPKEEP_MS = 500;

interface Checkpoint {
  handled: number;
  claimMs: number;
  claimP99: number;
  finishMs: number;
}

function checkpoint(handled: number, claims: number[], finishes: number[]): Checkpoint {
  return { handled, claimMs: mean(claims), claimP99: percentile(claims, 99) ?? 0, finishMs: mean(finishes) };
}

/** Enqueues `n` jobs over the tenants, then claims and finishes until none is left. */
async function round(
  tusk: Tusk,
  c: pg.PoolClient,
  n: number,
  batch: number,
  claims: number[],
  finishes: number[],
): Promise<number> {
  await tusk.enqueueMany(
    Array.from({ length: n }, (_, k) => ({ task: 'work', tenant: `t${k % TENANTS}`, queue: 'pinned' })),
  );
  let handled = 0;
  for (;;) {
    let t = performance.now();
    const { rows } = await c.query<{ id: string; token: string }>(
      `SELECT id, lease_token AS token FROM "${SCHEMA}".claim_jobs(NULL, $1, 30000, '{pinned}')`,
      [batch],
    );
    claims.push(performance.now() - t);
    if (rows.length === 0) return handled;
    t = performance.now();
    await c.query(`SELECT count(*) FROM "${SCHEMA}".finish_jobs('succeeded', $1::jsonb)`, [
      JSON.stringify(rows.map((r) => ({ id: r.id, token: r.token }))),
    ]);
    finishes.push(performance.now() - t);
    handled += rows.length;
  }
}

/** Runs `maintain()` on its own connection every UPKEEP_MS until stopped, as a worker does. */
function upkeep(pool: pg.Pool): () => Promise<void> {
  let stopped = false;
  const loop = (async () => {
    const u = await pool.connect();
    try {
      while (!stopped) {
        await u.query(`SELECT "${SCHEMA}".maintain()`);
        await new Promise((r) => setTimeout(r, UPKEEP_MS));
      }
    } finally {
      u.release();
    }
  })();
  return async () => {
    stopped = true;
    await loop;
  };
}

async function runCase(pool: pg.Pool, tusk: Tusk, o: PinnedOptions, label: string): Promise<Checkpoint[]> {
  const c = await pool.connect();
  const pin = await pool.connect();
  const stopUpkeep = upkeep(pool);
  const points: Checkpoint[] = [];
  try {
    // before the pin: the reference
    const claims: number[] = [];
    const finishes: number[] = [];
    for (let i = 0; i < 5; i++) await round(tusk, c, PER_ROUND, o.batch, claims, finishes);
    points.push(checkpoint(0, claims, finishes));

    await pin.query('BEGIN');
    await pin.query('SELECT txid_current()');
    const step = Math.ceil(o.jobs / o.checkpoints);
    let handled = 0;
    while (handled < o.jobs) {
      const claimsHere: number[] = [];
      const finishesHere: number[] = [];
      const to = Math.min(o.jobs, handled + step);
      while (handled < to) {
        status(`pinned · ${label} · ${handled.toLocaleString('en')} / ${o.jobs.toLocaleString('en')} jobs`);
        handled += await round(tusk, c, Math.min(PER_ROUND, to - handled), o.batch, claimsHere, finishesHere);
      }
      points.push(checkpoint(handled, claimsHere, finishesHere));
    }
    await pin.query('COMMIT');
  } finally {
    await pin.query('ROLLBACK').catch(() => {});
    await stopUpkeep();
    pin.release();
    c.release();
  }
  return points;
}

export async function pinned(o: PinnedOptions): Promise<boolean> {
  const pool = new pg.Pool({ connectionString: o.url, max: 4 });
  const tusk = new Tusk({ connectionString: o.url, schema: SCHEMA, logger: false });
  try {
    const cases: Array<{ label: string; points: Checkpoint[] }> = [];
    for (const label of ['no limits', 'slots 8 per tenant']) {
      status(`pinned · ${label} · setting up`);
      await dropSchema(pool, SCHEMA);
      await tusk.migrate();
      if (label !== 'no limits') await tusk.tenants.setDefault({ slots: 8 });
      cases.push({ label, points: await runCase(pool, tusk, o, label) });
    }
    statusDone();
    const server = await serverInfo(o.url);
    const ratios = cases.map((c) => (c.points.at(-1)?.claimMs ?? 0) / (c.points[0]?.claimMs ?? 1));
    const met = ratios.every((r) => r <= GOAL);
    console.log(
      [
        `Pinned horizon: a transaction holding an xid stays open while ${o.jobs.toLocaleString('en')} jobs over ${TENANTS} tenants are enqueued (${PER_ROUND.toLocaleString('en')} at a time) and drained by claim_jobs(${o.batch}) + finish_jobs on one connection, maintain() every ${UPKEEP_MS} ms on another (PostgreSQL ${server.server_version})`,
        '',
        renderTable(
          ['tenants', 'jobs handled since the pin', 'claim ms', 'claim p99 ms', 'finish ms'],
          cases.flatMap((c) =>
            c.points.map((p, i) => [
              i === 0 ? c.label : '',
              i === 0 ? 'before the pin' : p.handled.toLocaleString('en'),
              p.claimMs.toFixed(2),
              p.claimP99.toFixed(2),
              p.finishMs.toFixed(2),
            ]),
          ),
        ),
        '',
        `Goal: a claim at the end of the pin ≤ ${GOAL}× a claim before it — ${met ? 'met' : 'NOT met'} (${ratios.map((r, i) => `${cases[i]?.label}: ${r.toFixed(2)}×`).join(', ')})`,
      ].join('\n'),
    );
    await saveResults('pinned', { options: o, server, cases, goal: { ratios, met } });
    return met;
  } finally {
    await dropSchema(pool, SCHEMA).catch(() => {});
    await tusk.close();
    await pool.end();
  }
}
