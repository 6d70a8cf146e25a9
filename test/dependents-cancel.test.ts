// A dependency that fails cancels its dependents, each error naming how the dependency
// ended. That state is read from job_history, partitioned by day: read by id alone, every
// day partition was probed once per dependent (000050). Measured as the index scans of the
// history partitions one cancel makes (the counts of its own transaction), not as time.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;
const DAYS = 35;
let c: pg.Client;

beforeAll(async () => {
  // a history kept 35 days: a partition for each day up to today
  await db.pool.query(
    `SELECT ${s}.create_history_partition(((now() AT TIME ZONE 'UTC')::date - g)::date)
     FROM generate_series(0, $1::int - 1) g`,
    [DAYS],
  );
  c = new pg.Client({ connectionString: db.url });
  await c.connect();
});

afterAll(async () => {
  await c?.end().catch(() => {});
});

const enqueue = async (task: string, options: object = {}): Promise<number> =>
  Number(
    (await c.query<{ id: string }>(`SELECT ${s}.enqueue_job($1, 'null', $2::jsonb) AS id`, [task, options])).rows[0]
      ?.id,
  );

/** Enqueues one job per element of `deps`, each depending on those ids; their ids, in order. */
const enqueueDependents = async (task: string, deps: number[][]): Promise<number[]> =>
  (
    await c.query<{ id: string }>(`SELECT id FROM ${s}.enqueue_jobs($1::jsonb)`, [
      JSON.stringify(deps.map((d) => ({ task, queue: 'idle', dependsOn: d }))),
    ])
  ).rows.map((r) => Number(r.id));

interface Probes {
  /** Index scans of the history partitions. */
  scans: number;
  /** History partitions with an index scanned. */
  partitions: number;
}

/** The history partitions' index scans so far in this transaction, by partition. */
async function historyScans(): Promise<Map<string, number>> {
  const { rows } = await c.query<{ part: string; n: string }>(
    `SELECT p.inhrelid::regclass::text AS part, sum(pg_stat_get_xact_numscans(i.indexrelid)) AS n
     FROM pg_inherits p JOIN pg_index i ON i.indrelid = p.inhrelid
     WHERE p.inhparent = '${s}.job_history'::regclass GROUP BY 1`,
  );
  return new Map(rows.map((r) => [r.part, Number(r.n)]));
}

/** Probes of history made by `finish`, run in the current transaction. */
async function probesOf(finish: () => Promise<unknown>): Promise<Probes> {
  const before = await historyScans();
  await finish();
  const after = await historyScans();
  let scans = 0;
  let partitions = 0;
  for (const [part, n] of after) {
    const d = n - (before.get(part) ?? 0);
    scans += d;
    if (d > 0) partitions++;
  }
  return { scans, partitions };
}

/** Errors of the jobs `ids` in history, cancelled: id → message. */
async function cancelled(ids: number[]): Promise<Map<number, string>> {
  const { rows } = await c.query<{ id: string; state: string; message: string }>(
    `SELECT id, state, errors -> -1 ->> 'message' AS message FROM ${s}.job_history WHERE id = ANY ($1::bigint[])`,
    [ids],
  );
  expect(rows.filter((r) => r.state !== 'cancelled')).toEqual([]);
  expect(rows).toHaveLength(ids.length);
  return new Map(rows.map((r) => [Number(r.id), r.message]));
}

/**
 * A job with `n` dependents (each with a dependent of its own if `deep`) ends dead: the
 * probes of history that made, all dependents checked cancelled. Rolled back.
 */
async function failWithDependents(n: number, deep: boolean): Promise<Probes> {
  await c.query('BEGIN');
  try {
    const root = await enqueue('root', { queue: 'idle' });
    const children = await enqueueDependents(
      'child',
      Array.from({ length: n }, () => [root]),
    );
    const grandchildren = deep
      ? await enqueueDependents(
          'grandchild',
          children.map((id) => [id]),
        )
      : [];
    const probes = await probesOf(() =>
      c.query(`SELECT count(*) FROM ${s}.finish_jobs('dead', $1::jsonb)`, [JSON.stringify([{ id: root }])]),
    );
    const messages = await cancelled([...children, ...grandchildren]);
    for (const id of children) expect(messages.get(id)).toBe(`job ${root}, which it depends on, ended dead`);
    grandchildren.forEach((id, k) => {
      expect(messages.get(id)).toBe(`job ${children[k]}, which it depends on, ended cancelled`);
    });
    return probes;
  } finally {
    await c.query('ROLLBACK');
  }
}

describe('a failed dependency cancels its dependents', () => {
  it('reading the history of the day it ended alone, once, however many dependents', async () => {
    const parts = await historyScans();
    expect(parts.size).toBeGreaterThanOrEqual(DAYS);
    // the first call plans the functions on this connection
    await failWithDependents(5, false);
    const few = await failWithDependents(20, false);
    const many = await failWithDependents(400, false);
    // one index scan of one partition (before: one per dependent in each of the 35 days)
    expect(many).toEqual(few);
    expect(many.partitions).toBeLessThanOrEqual(1);
    expect(many.scans).toBeLessThanOrEqual(1);
  });

  it('up the flow too: each cancelled dependency looked up at most once, in one partition', async () => {
    const many = await failWithDependents(200, true);
    expect(many.partitions).toBeLessThanOrEqual(1);
    // the root, then the 200 children the grandchildren name (before: 35 per dependent)
    expect(many.scans).toBeLessThanOrEqual(1 + 200);
  });

  it('each dependent names the first of its failed dependencies and how that one ended', async () => {
    await c.query('BEGIN');
    try {
      const a = await enqueue('a', { queue: 'pair' });
      const b = await enqueue('b', { queue: 'pair' });
      const { rows } = await c.query<{ id: string; lease_token: string }>(
        `SELECT id, lease_token FROM ${s}.claim_jobs(NULL, 2, 60000, '{pair}') ORDER BY id`,
      );
      expect(rows.map((r) => Number(r.id))).toEqual([a, b]);
      // b was asked to stop while it ran: failing, it ends cancelled
      expect((await c.query(`SELECT ${s}.cancel_job($1) AS state`, [b])).rows[0]?.state).toBe('running');
      const [onA = 0, onB = 0, onBoth = 0] = await enqueueDependents('dependent', [[a], [b], [b, a]]);
      const goesOn = await enqueue('goes-on', { queue: 'idle', dependsOn: [a], onDependencyFailure: 'continue' });
      await c.query(`SELECT count(*) FROM ${s}.finish_jobs('dead', $1::jsonb)`, [
        JSON.stringify(rows.map((r) => ({ id: Number(r.id), token: Number(r.lease_token) }))),
      ]);
      const messages = await cancelled([onA, onB, onBoth]);
      expect(messages.get(onA)).toBe(`job ${a}, which it depends on, ended dead`);
      expect(messages.get(onB)).toBe(`job ${b}, which it depends on, ended cancelled`);
      expect(messages.get(onBoth)).toBe(`job ${a}, which it depends on, ended dead`);
      const { rows: went } = await c.query(`SELECT state, waiting_on FROM ${s}.jobs WHERE id = $1`, [goesOn]);
      expect(went).toEqual([{ state: 'available', waiting_on: 0 }]);
    } finally {
      await c.query('ROLLBACK');
    }
  });
});
