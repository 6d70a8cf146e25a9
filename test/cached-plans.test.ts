import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

// A worker's connections live long, and the claim's functions keep their plans for the
// connection's life: planned once, when the tables were small. Those plans must not come
// to walk what grows later, here the dead entries a pinned horizon keeps at the front of a
// lane. Measured as the blocks of the lanes' indexes one claim reads (the counts of its
// own transaction), not as time.

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;
const opened: pg.Client[] = [];

async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  opened.push(c);
  return c;
}

afterEach(async () => {
  for (const c of opened.splice(0)) await c.end().catch(() => {});
});

beforeAll(async () => {
  // the statistics stay those of the new table, as before a first autovacuum
  await db.pool.query(`ALTER TABLE ${s}.jobs SET (autovacuum_enabled = false)`);
  // one tenant with slots (its running jobs counted, its lane read under its row lock),
  // three without
  await db.pool.query(`SELECT ${s}.set_tenant('t3', 1000000, false, NULL, false, NULL)`);
});

const enqueue = (n: number) =>
  db.pool.query(
    `INSERT INTO ${s}.jobs (task, payload, queue, tenant) SELECT 'work', 'null', 'pinned', 't' || (g % 4) FROM generate_series(1, $1::int) g`,
    [n],
  );

/** Claims up to `limit` jobs on `c`, then finishes them. Returns how many. */
async function claimAndFinish(c: pg.Client, limit: number): Promise<number> {
  const { rows } = await c.query<{ id: string; lease_token: string }>(
    `SELECT id, lease_token FROM ${s}.claim_jobs(NULL, $1, 3600000, '{pinned}')`,
    [limit],
  );
  if (rows.length === 0) return 0;
  await c.query(`SELECT count(*) FROM ${s}.finish_jobs('succeeded', $1::jsonb)`, [
    JSON.stringify(rows.map((r) => ({ id: Number(r.id), token: Number(r.lease_token) }))),
  ]);
  return rows.length;
}

/**
 * Blocks of the lanes' indexes one claim of `limit` reads on `c` (the counts of its own
 * transaction, rolled back), with the jobs it took.
 */
async function blocksRead(c: pg.Client, limit: number): Promise<{ blocks: number; claimed: number }> {
  const read = async () =>
    Number(
      (
        await c.query<{ n: string }>(
          `SELECT sum(pg_stat_get_xact_blocks_fetched(i)) AS n
           FROM unnest(ARRAY['${s}.jobs_ready'::regclass, '${s}.jobs_ready_pair'::regclass]) i`,
        )
      ).rows[0]?.n ?? 0,
    );
  await c.query('BEGIN');
  try {
    const before = await read();
    const { rows } = await c.query(`SELECT id FROM ${s}.claim_jobs(NULL, $1, 3600000, '{pinned}')`, [limit]);
    return { blocks: (await read()) - before, claimed: rows.length };
  } finally {
    await c.query('ROLLBACK');
  }
}

/**
 * Blocks of `jobs` (heap and indexes) that completing 16 jobs reads on `c`: the jobs are
 * claimed, then finished, in one transaction rolled back.
 */
async function finishBlocksRead(c: pg.Client): Promise<number> {
  const read = async () =>
    Number(
      (
        await c.query<{ n: string }>(
          `SELECT pg_stat_get_xact_blocks_fetched('${s}.jobs'::regclass)
                  + pg_stat_get_xact_blocks_fetched('${s}.jobs_pkey'::regclass) AS n`,
        )
      ).rows[0]?.n ?? 0,
    );
  await c.query('BEGIN');
  try {
    const { rows } = await c.query<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM ${s}.claim_jobs(NULL, 16, 3600000, '{pinned}')`,
    );
    expect(rows).toHaveLength(16);
    const before = await read();
    await c.query(`SELECT count(*) FROM ${s}.finish_jobs('succeeded', $1::jsonb)`, [
      JSON.stringify(rows.map((r) => ({ id: Number(r.id), token: Number(r.lease_token) }))),
    ]);
    return (await read()) - before;
  } finally {
    await c.query('ROLLBACK');
  }
}

describe('plans kept by a connection', () => {
  it("a claim reads no more of the lanes' indexes, and a completion no more of the jobs, once a pinned horizon keeps 22 000 dead jobs", async () => {
    const worker = await client();
    // the connection's first claims, on a small table, plan the claim's functions
    await enqueue(2000);
    while ((await claimAndFinish(worker, 16)) > 0) {}

    const pin = await client();
    await pin.query('BEGIN');
    await pin.query('SELECT pg_current_xact_id()');
    await enqueue(2000);
    const before = await blocksRead(worker, 16);
    const finishBefore = await finishBlocksRead(worker);
    for (let round = 0; round < 4; round++) {
      while ((await claimAndFinish(worker, 500)) > 0) {}
      await enqueue(5000);
    }
    // each lane's front: 5 500 jobs claimed and finished while the horizon was pinned,
    // dead index entries that the pin keeps
    while ((await claimAndFinish(worker, 500)) > 0) {}
    await enqueue(2000);
    const after = await blocksRead(worker, 16);
    expect(before.claimed).toBe(16);
    expect(after.claimed).toBe(16);
    expect(after.blocks).toBeLessThan(before.blocks * 2);
    // the completion's plan, made on the small table, finds its jobs by id
    const finishAfter = await finishBlocksRead(worker);
    expect(finishAfter).toBeLessThan(finishBefore * 2);
    await pin.query('ROLLBACK');
  });

  it('the hot paths call no SQL-language helper, which would be planned again at each call', async () => {
    // A LANGUAGE sql function that is not inlined (a FROM clause, a write, SECURITY
    // DEFINER) is parsed and planned at every call; one called twice a claim took a tenth
    // of the claim's time. Function statistics list the functions a transaction called
    // and not the inlined ones, so what this one calls must be PL/pgSQL, or immutable SQL
    // without arguments (a lock key: folded to a constant when the caller is planned).
    const c = await client();
    await c.query('BEGIN');
    try {
      await c.query(`SET LOCAL track_functions = 'all'`);
      await c.query(`SELECT ${s}.enqueue_job('hot', '{}', '{"queue": "hot"}')`);
      await c.query(
        `SELECT * FROM ${s}.enqueue_jobs('[{"task": "hot", "queue": "hot"}, {"task": "hot", "queue": "hot"}]')`,
      );
      const claimed = await c.query<{ id: string; lease_token: string }>(
        `SELECT id, lease_token FROM ${s}.claim_jobs(NULL, 1, 60000, '{hot}')`,
      );
      const fetched = await c.query<{ id: string; lease_token: string }>(
        `SELECT id, lease_token FROM ${s}.fetch_jobs(2, 60000, 'hot')`,
      );
      const [a, b] = fetched.rows;
      const [own] = claimed.rows;
      expect(own && a && b).toBeTruthy();
      if (!own || !a || !b) return;
      await c.query(`SELECT ${s}.extend_lease($1, $2, 60000)`, [a.id, a.lease_token]);
      await c.query(`SELECT ${s}.ack_job($1, $2)`, [a.id, a.lease_token]);
      await c.query(`SELECT ${s}.nack_job($1, $2)`, [b.id, b.lease_token]);
      await c.query(`SELECT count(*) FROM ${s}.finish_jobs('succeeded', $1::jsonb)`, [
        JSON.stringify([{ id: Number(own.id), token: Number(own.lease_token) }]),
      ]);
      await c.query(`SELECT * FROM ${s}.find_token('\\x00')`);
      const called = await c.query<{ name: string; language: string }>(
        `SELECT p.proname AS name, l.lanname AS language
         FROM pg_stat_xact_user_functions f JOIN pg_proc p ON p.oid = f.funcid
         JOIN pg_language l ON l.oid = p.prolang
         WHERE f.schemaname = $1 AND NOT (p.provolatile = 'i' AND p.pronargs = 0) ORDER BY 1`,
        [db.schema],
      );
      // the calls were counted: the claim's own helpers are among them
      expect(called.rows.map((r) => r.name)).toEqual(
        expect.arrayContaining(['claim_jobs', 'look_snapshot', 'enqueue_entry']),
      );
      expect(called.rows.filter((r) => r.language !== 'plpgsql')).toEqual([]);
    } finally {
      await c.query('ROLLBACK');
    }
  });

  it('functions that turn sequential scans off turn JIT off too', async () => {
    // with sequential scans off, a read that has no other path (a small table read whole)
    // is costed 10^10, past JIT's thresholds: hundreds of ms to compile a read of one row
    const rows = await db.rows<{ name: string; config: string[] }>(
      `SELECT p.proname AS name, p.proconfig AS config FROM pg_proc p
       WHERE p.pronamespace = $1::regnamespace AND 'enable_seqscan=off' = ANY (p.proconfig)`,
      [db.schema],
    );
    expect(rows.map((r) => r.name)).toEqual(expect.arrayContaining(['pairs_with_work', 'running_now', 'key_lanes']));
    expect(rows.filter((r) => !r.config.includes('jit=off')).map((r) => r.name)).toEqual([]);
  });
});
