import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createServer } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

// The claim reads each lane from its newest mark on, plus the jobs that arrived since the
// mark's snapshot (sql/000030_baseline.sql, part 5, "Claim"). These tests force the
// interleavings that could make a mark pass a job: a job committed after a later claim's
// mark, a job made available again behind a mark, a mark renewed by the upkeep, a lane
// dropped while idle, the arrivals lock held elsewhere, claims in parallel with late
// commits.

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;

// the warnings of this file's process, for the test of Tusk's connection setup
const warnings: string[] = [];
process.on('warning', (w) => warnings.push(`${w.name}: ${w.message}`));

/** A database URL whose sessions default to SERIALIZABLE. */
const serializableUrl = () =>
  `${db.url}${db.url.includes('?') ? '&' : '?'}options=${encodeURIComponent('-c default_transaction_isolation=serializable')}`;

/** The ids of the jobs an HTTP server's `/api/fetch` leases from `queue`, and the answer's status. */
async function httpFetch(url: string, token: string, queue: string) {
  const res = await fetch(`${url}/api/fetch`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ queue }),
  });
  const ids = res.status === 200 ? ((await res.json()) as { jobs: Array<{ id: string }> }).jobs.map((j) => j.id) : [];
  return { status: res.status, ids };
}

const enqueue = async (queue: string, options: Record<string, unknown> = {}, on: pg.ClientBase | pg.Pool = db.pool) =>
  (
    await on.query<{ id: string }>(`SELECT ${s}.enqueue_job('work', 'null', $1) AS id`, [
      JSON.stringify({ queue, ...options }),
    ])
  ).rows[0]?.id as string;

const claim = async (queue: string, limit: number, on: pg.ClientBase | pg.Pool = db.pool, leaseMs = 60_000) =>
  (
    await on.query<{ id: string; token: string }>(
      `SELECT id, lease_token AS token FROM ${s}.claim_jobs(NULL, $1, $2, $3)`,
      [limit, leaseMs, [queue]],
    )
  ).rows;

const finish = (rows: Array<{ id: string; token: string }>, on: pg.ClientBase | pg.Pool = db.pool) =>
  on.query(`SELECT count(*) FROM ${s}.finish_jobs('succeeded', $1::jsonb)`, [JSON.stringify(rows)]);

/** The newest mark of a lane: its position's id. */
const markId = async (queue: string, tenant = 'default') =>
  (
    await db.rows<{ id: string }>(
      'SELECT id FROM $schema.lane_marks WHERE queue = $1 AND tenant = $2 ORDER BY seq DESC LIMIT 1',
      [queue, tenant],
    )
  )[0]?.id;

const session = async () => {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  return c;
};

describe('claims from lane marks', () => {
  for (const limited of [false, true]) {
    it(`a job committed after a later claim wrote its mark is still claimed (${limited ? 'a tenant with slots' : 'no limits'}, 5 times)`, async () => {
      const tenant = limited ? 'slotted' : 'default';
      if (limited) await db.tusk.tenants.set(tenant, { slots: 50 });
      const late = await session();
      try {
        for (let round = 0; round < 5; round++) {
          const queue = `late-${limited}-${round}`;
          await late.query('BEGIN');
          const first = await enqueue(queue, { tenant }, late); // the lowest id, not yet committed
          const others = [await enqueue(queue, { tenant }), await enqueue(queue, { tenant })];
          const got = await claim(queue, 10);
          expect(got.map((r) => r.id).sort()).toEqual(others.sort());
          // the mark is past the uncommitted job: only the arrivals rule can find it
          expect(BigInt((await markId(queue, tenant)) ?? 0)).toBeGreaterThan(BigInt(first));
          await late.query('COMMIT');
          const again = await claim(queue, 10);
          expect(again.map((r) => r.id)).toEqual([first]);
          await finish([...got, ...again]);
        }
      } finally {
        await late.end();
      }
    });
  }

  for (const passes of ['the same pass', 'a later pass'])
    it(`a job made available again behind the mark is claimed again, also when the upkeep renews marks (in ${passes})`, async () => {
      for (let round = 0; round < 3; round++) {
        const queue = `again-${passes.length}-${round}`;
        const ids = [await enqueue(queue), await enqueue(queue), await enqueue(queue)];
        const got = await claim(queue, 3, db.pool, 1); // a lease of 1 ms: the upkeep takes them back
        expect(got).toHaveLength(3);
        await finish(got.slice(1)); // the first stays running, its lease runs out
        expect(await markId(queue)).toBe(ids[2]);
        await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [got[0]?.id]);
        if (passes === 'a later pass') {
          // requeued by a transaction that commits before the renewing one begins: its
          // xid is in no later snapshot's xip, so only the old mark's arrivals show it
          const [first] = await db.rows<{ r: { released: number } }>('SELECT $schema.maintain(0) AS r');
          expect(first?.r.released).toBe(1);
        }
        // every mark looks old: the upkeep renews those it may
        await db.rows(`UPDATE $schema.lane_marks SET at = at - interval '1 minute'`);
        await db.rows('SELECT $schema.maintain(0)');
        const again = await claim(queue, 3);
        expect(again.map((r) => r.id)).toEqual([ids[0]]);
        await finish(again);
      }
    });

  it('the upkeep renews an idle lane’s mark, and a job that arrives after it is claimed', async () => {
    const queue = 'renewed';
    const a = await enqueue(queue);
    const got = await claim(queue, 1);
    await finish(got);
    const before = await db.rows<{ n: string }>(
      `SELECT count(*) AS n FROM $schema.lane_marks WHERE queue = $1 AND NOT claimed`,
      [queue],
    );
    await db.rows(`UPDATE $schema.lane_marks SET at = at - interval '5 seconds' WHERE queue = $1`, [queue]);
    await db.rows('SELECT $schema.maintain()');
    const after = await db.rows<{ n: string }>(
      `SELECT count(*) AS n FROM $schema.lane_marks WHERE queue = $1 AND NOT claimed`,
      [queue],
    );
    expect(Number(after[0]?.n)).toBe(Number(before[0]?.n) + 1);
    expect(await markId(queue)).toBe(a);
    const b = await enqueue(queue);
    expect((await claim(queue, 5)).map((r) => r.id)).toEqual([b]);
  });

  it('a lane idle for a minute leaves the active pairs, and comes back with its next job', async () => {
    const queue = 'idle';
    await enqueue(queue);
    await finish(await claim(queue, 1));
    await db.rows(`UPDATE $schema.lane_marks SET at = at - interval '2 minutes' WHERE queue = $1`, [queue]);
    await db.rows('SELECT $schema.maintain()');
    expect(await db.rows('SELECT 1 FROM $schema.active_pairs WHERE queue = $1', [queue])).toEqual([]);
    const id = await enqueue(queue);
    expect((await claim(queue, 5)).map((r) => r.id)).toEqual([id]);
  });

  it('the upkeep deletes the marks, serves and looks behind the newest, and keeps the newest', async () => {
    const queue = 'pruned';
    for (let i = 0; i < 5; i++) {
      await enqueue(queue, { tenant: 'pruned-t' });
      await finish(await claim(queue, 1));
    }
    const newest = await markId(queue, 'pruned-t');
    expect(
      Number(
        (await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.lane_marks WHERE queue = $1', [queue]))[0]?.n,
      ),
    ).toBe(5);
    await db.rows('SELECT $schema.maintain()');
    const left = await db.rows<{ marks: number; serves: number; scans: number }>(
      `SELECT (SELECT count(*)::int FROM $schema.lane_marks WHERE queue = $1) AS marks,
              (SELECT count(*)::int FROM $schema.tenant_serves WHERE tenant = 'pruned-t') AS serves,
              (SELECT count(*)::int FROM $schema.pair_scans) AS scans`,
      [queue],
    );
    expect(left).toEqual([{ marks: 1, serves: 1, scans: 1 }]);
    expect(await markId(queue, 'pruned-t')).toBe(newest);
    const id = await enqueue(queue, { tenant: 'pruned-t' });
    expect((await claim(queue, 5)).map((r) => r.id)).toEqual([id]);
  });

  it('a mark from the future (a database restored into another cluster) is ignored', async () => {
    const queue = 'restored';
    await db.rows(
      `INSERT INTO $schema.lane_marks (queue, tenant, priority, id, snap)
       VALUES ($1, 'default', 32767, 9223372036854775807, '9000000000000:9000000000000:')`,
      [queue],
    );
    const id = await enqueue(queue);
    expect((await claim(queue, 5)).map((r) => r.id)).toEqual([id]);
  });

  it('while another session holds the arrivals lock, a claim still sees a job committed before it', async () => {
    const holder = await session();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(${s}.arrivals_lock(), 0)`);
      const id = await enqueue('locked-out');
      expect((await claim('locked-out', 5)).map((r) => r.id)).toEqual([id]);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });

  it('a claim that rolls back after a parallel claim skipped its jobs: they are claimed again (3 times)', async () => {
    for (let round = 0; round < 3; round++) {
      const queue = `rollback-${round}`;
      const ids = [];
      for (let i = 0; i < 4; i++) ids.push(await enqueue(queue));
      const first = await session();
      try {
        await first.query('BEGIN');
        expect((await claim(queue, 2, first)).map((r) => r.id)).toEqual(ids.slice(0, 2));
        // this claim skips the two locked jobs: it must not mark the lane past them
        const second = await claim(queue, 2);
        expect(second.map((r) => r.id)).toEqual(ids.slice(2));
        await first.query('ROLLBACK'); // a claim lost with its connection
        const again = await claim(queue, 5);
        expect(again.map((r) => r.id)).toEqual(ids.slice(0, 2));
        await finish([...second, ...again]);
      } finally {
        await first.end();
      }
    }
  });

  it('a claim that skipped a locked job marks the lane up to the job before it, and the job is claimed later', async () => {
    const queue = 'partial';
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await enqueue(queue));
    const holder = await session();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM ${s}.jobs WHERE id = $1 FOR UPDATE`, [ids[2]]);
      const got = await claim(queue, 5);
      expect(got.map((r) => r.id)).toEqual([ids[0], ids[1], ids[3]]);
      expect(await markId(queue)).toBe(ids[1]);
      await holder.query('ROLLBACK');
      const again = await claim(queue, 5);
      expect(again.map((r) => r.id)).toEqual([ids[2]]);
      await finish([...got, ...again]);
    } finally {
      await holder.end();
    }
  });

  it('a job made available again behind the mark and held elsewhere keeps the mark where it was, and is claimed later', async () => {
    const queue = 'held-arrival';
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await enqueue(queue));
    const got = await claim(queue, 2, db.pool, 1);
    await finish(got.slice(1));
    await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [got[0]?.id]);
    await db.rows('SELECT $schema.maintain(0)'); // the first job's lease ran out: available again, behind the mark
    const holder = await session();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM ${s}.jobs WHERE id = $1 FOR UPDATE`, [ids[0]]);
      const rest = await claim(queue, 5);
      expect(rest.map((r) => r.id)).toEqual([ids[2], ids[3]]);
      expect(await markId(queue)).toBe(ids[1]);
      await holder.query('ROLLBACK');
      const again = await claim(queue, 5);
      expect(again.map((r) => r.id)).toEqual([ids[0]]);
      await finish([...rest, ...again]);
    } finally {
      await holder.end();
    }
  });

  // A consumer's transaction that fetched (writing a mark and a look) and then makes a job
  // available in that same transaction: its own xid is in no snapshot's list of running
  // transactions, and below the xmax of one taken after a later transaction ended.
  const ownTransaction = async (act: (own: pg.Client) => Promise<void>) => {
    const own = await session();
    try {
      await own.query('BEGIN');
      await own.query('SELECT pg_current_xact_id()'); // its xid, before the other's
      await db.pool.query(`SELECT ${s}.enqueue_job('work', 'null', '{"queue": "elsewhere"}')`); // a later xid ends
      await act(own);
      await own.query('COMMIT');
    } finally {
      await own.end();
    }
  };
  const fetchOne = async (queue: string, on: pg.ClientBase) =>
    (
      await on.query<{ id: string; token: string }>(
        `SELECT id, lease_token AS token FROM ${s}.fetch_jobs(1, 60000, $1)`,
        [queue],
      )
    ).rows;

  it('a job the fetching transaction gives back behind the mark it wrote is claimed later (3 times)', async () => {
    for (let round = 0; round < 3; round++) {
      const queue = `own-nack-${round}`;
      const ids = [await enqueue(queue), await enqueue(queue)];
      await ownTransaction(async (own) => {
        const got = await fetchOne(queue, own);
        expect(got.map((r) => r.id)).toEqual([ids[0]]);
        expect(await markId(queue)).toBeUndefined(); // not committed yet
        await own.query(`SELECT ${s}.nack_job($1, $2, 0)`, [got[0]?.id, got[0]?.token]);
      });
      expect(await markId(queue)).toBe(ids[0]);
      const again = await claim(queue, 5);
      expect(again.map((r) => r.id)).toEqual(ids);
      await finish(again);
    }
  });

  it('a job the fetching transaction enqueues in a lane new to the active pairs is claimed', async () => {
    const first = await enqueue('own-fetch');
    await ownTransaction(async (own) => {
      const got = await fetchOne('own-fetch', own);
      expect(got.map((r) => r.id)).toEqual([first]);
      await enqueue('own-follow-up', {}, own);
      await own.query(`SELECT ${s}.ack_job($1, $2)`, [got[0]?.id, got[0]?.token]);
    });
    const followUp = await claim('own-follow-up', 5);
    expect(followUp).toHaveLength(1);
    await finish(followUp);
  });

  it('a claim, a fold or a pruning in a REPEATABLE READ or SERIALIZABLE transaction is refused, naming it', async () => {
    // under the snapshot of its first statement, a claim counted a tenant's running jobs
    // as they were before another claim took one: two running on one slot
    await db.tusk.tenants.set('one-slot', { slots: 1 });
    await enqueue('rr-a', { tenant: 'one-slot' });
    await enqueue('rr-b', { tenant: 'one-slot' });
    await db.rows('SELECT $schema.ready_pairs(NULL, NULL)'); // both pairs taken up: the claims below only read them
    const reader = await session();
    try {
      for (const level of ['REPEATABLE READ', 'SERIALIZABLE']) {
        await reader.query(`BEGIN ISOLATION LEVEL ${level}`);
        await reader.query('SELECT 1'); // its snapshot, before the claim below
        if (level === 'REPEATABLE READ') expect(await claim('rr-a', 1)).toHaveLength(1);
        await expect(reader.query(`SELECT * FROM ${s}.fetch_jobs(1, 60000, 'rr-b', 'one-slot')`)).rejects.toThrow(
          `claim_jobs() needs READ COMMITTED, not ${level}`,
        );
        await reader.query('ROLLBACK');
        for (const step of ['fold_running', 'prune_lanes']) {
          await reader.query(`BEGIN ISOLATION LEVEL ${level}`);
          await expect(reader.query(`SELECT ${s}.${step}()`)).rejects.toThrow(`${step}() needs READ COMMITTED`);
          await reader.query('ROLLBACK');
        }
      }
      const running = await db.rows<{ n: number }>(
        "SELECT count(*)::integer AS n FROM $schema.jobs WHERE tenant = 'one-slot' AND state = 'running'",
      );
      expect(running[0]?.n).toBe(1);
    } finally {
      await reader.end();
    }
  });

  it("Tusk's own connections run at READ COMMITTED: a worker, the upkeep and the HTTP fetch work under a SERIALIZABLE default", async () => {
    const strict = db.another({ connectionString: serializableUrl() });
    const { id } = await strict.enqueue('work', null, { queue: 'strict' });
    const worker = db.worker({ queues: ['strict'], tasks: { work: async () => 'ok' } }, strict);
    await worker.start();
    await eventually(async () => (await strict.getJob(id))?.state === 'succeeded');
    await worker.stop();
    const pool = await strict.pool();
    expect((await pool.query('SHOW default_transaction_isolation')).rows).toEqual([
      { default_transaction_isolation: 'read committed' },
    ]);
    const upkeep = await pool.query<{ r: { errors: unknown[] } }>(`SELECT ${s}.maintain(0) AS r`);
    expect(upkeep.rows[0]?.r.errors).toEqual([]);
    const token = 'strict-admin-token-0123456789';
    const server = await createServer(strict, { adminToken: token });
    const up = await server.listen({ port: 0 });
    try {
      const { id: remote } = await strict.enqueue('work', null, { queue: 'strict-http' });
      expect(await httpFetch(up.url, token, 'strict-http')).toEqual({ status: 200, ids: [remote] });
    } finally {
      await up.close();
    }
    // the setting is made before the pool hands a connection out, not queued beside the
    // caller's first query (which node-postgres warns of, and version 9 refuses)
    expect(warnings.filter((w) => w.includes('already executing a query'))).toEqual([]);
  });

  it("the HTTP server's pools, made from an app's pool, run the app pool's onConnect and then set READ COMMITTED", async () => {
    let hooked = 0;
    const appPool = new pg.Pool({
      connectionString: serializableUrl(),
      max: 2,
      onConnect: async () => {
        hooked++;
      },
    });
    const app = db.another({ pool: appPool });
    const token = 'app-pool-admin-token-0123456789';
    const up = await (await createServer(app, { adminToken: token })).listen({ port: 0 });
    try {
      const before = hooked;
      const { id } = await db.tusk.enqueue('work', null, { queue: 'app-pool-http' });
      expect(await httpFetch(up.url, token, 'app-pool-http')).toEqual({ status: 200, ids: [id] });
      expect(hooked).toBeGreaterThan(before); // the leases pool's new connection ran the app's hook
    } finally {
      await up.close();
      await app.close();
      await appPool.end();
    }
  });

  it('a fetch whose transaction stays open does not hold up the upkeep', async () => {
    const holder = await session();
    try {
      await holder.query('BEGIN');
      // the fetch takes the arrivals lock, held until its transaction ends
      expect((await holder.query(`SELECT * FROM ${s}.fetch_jobs(1, 60000, 'nothing-here')`)).rows).toEqual([]);
      const upkeep = await session();
      try {
        await upkeep.query("SET statement_timeout = '5s'");
        const { rows } = await upkeep.query<{ r: { errors: unknown[]; idlePairs: number } }>(
          `SELECT ${s}.maintain(0) AS r`,
        );
        expect(rows[0]?.r.errors).toEqual([]);
        expect(rows[0]?.r.idlePairs).toBe(0);
      } finally {
        await upkeep.end();
      }
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });

  it('claims in parallel with enqueues that commit late: every job claimed exactly once (3 runs)', async () => {
    for (let run = 0; run < 3; run++) {
      const queue = `parallel-${run}`;
      const claimers = await Promise.all([session(), session(), session()]);
      const producers = await Promise.all([session(), session()]);
      const seen = new Map<string, number>();
      let producing = true;
      const enqueued: string[] = [];
      try {
        // producers hold each enqueue open for a while, so claims write marks past them
        const produce = producers.map(async (p, k) => {
          for (let i = 0; i < 15; i++) {
            await p.query('BEGIN');
            for (let j = 0; j < 20; j++) enqueued.push(await enqueue(queue, { priority: (i + j + k) % 3 }, p));
            // the transaction stays open while claims go on: the interleaving under test, not a wait
            await p.query('SELECT pg_sleep(0.02)');
            await p.query('COMMIT');
          }
        });
        const drain = claimers.map(async (c) => {
          for (;;) {
            const rows = await claim(queue, 7, c);
            for (const r of rows) seen.set(r.id, (seen.get(r.id) ?? 0) + 1);
            if (rows.length) await finish(rows, c);
            else if (!producing) return;
            // found nothing while producers run: a pause before it looks again (the loop ends on a condition)
            else await c.query('SELECT pg_sleep(0.005)');
          }
        });
        await Promise.all(produce);
        producing = false;
        await Promise.all(drain);
        // the last claims may have ended before the last commit was seen: one more pass
        for (;;) {
          const rows = await claim(queue, 100);
          for (const r of rows) seen.set(r.id, (seen.get(r.id) ?? 0) + 1);
          if (!rows.length) break;
          await finish(rows);
        }
      } finally {
        await Promise.all([...claimers, ...producers].map((c) => c.end()));
      }
      expect(enqueued).toHaveLength(600);
      expect([...seen.values()].filter((n) => n !== 1)).toEqual([]);
      expect([...seen.keys()].sort()).toEqual([...enqueued].sort());
      expect(await db.rows('SELECT id FROM $schema.jobs WHERE queue = $1', [queue])).toEqual([]);
    }
  });
});

describe('running counts', () => {
  it('the fold waits for a claim in progress, and the count stays exact across it', async () => {
    await db.tusk.tenants.set('counted', { slots: 5 });
    for (let i = 0; i < 3; i++) await enqueue('counted', { tenant: 'counted' });
    const writer = await session();
    try {
      await writer.query('BEGIN');
      expect(await claim('counted', 2, writer)).toHaveLength(2);
      // the claim's delta is not committed: the fold must not move past it
      const [busy] = await db.rows<{ n: number }>('SELECT $schema.fold_running() AS n');
      expect(busy?.n).toBe(0);
      await writer.query('COMMIT');
      const [folded] = await db.rows<{ n: number }>('SELECT $schema.fold_running() AS n');
      expect(folded?.n).toBeGreaterThanOrEqual(1);
      const [count] = await db.rows<{ counted: number; real: number }>(
        `SELECT $schema.running_now('counted', '') AS counted,
                (SELECT count(*)::int FROM $schema.jobs WHERE tenant = 'counted' AND state = 'running') AS real`,
      );
      expect(count).toEqual({ counted: 2, real: 2 });
      // three of five slots free: the next claim takes the last job
      expect(await claim('counted', 5)).toHaveLength(1);
    } finally {
      await writer.end();
    }
  });
});
