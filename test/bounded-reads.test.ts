import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

// The hot path's statements find their jobs by index conditions, so that what they read
// does not grow with what they do not need: other running jobs, or jobs enqueued after a
// lane's mark. Measured as the rows a call fetched from `jobs` (the transaction's own
// counts, pg_stat_xact_user_tables), not as time.

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;

/** Rows `call` fetched from jobs (sequential reads and index fetches), in a transaction rolled back. */
async function jobsRowsRead(call: (c: pg.Client) => Promise<unknown>): Promise<number> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  const read = async () =>
    Number(
      (
        await c.query<{ n: string }>(
          `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n
           FROM pg_stat_xact_user_tables WHERE relid = '${s}.jobs'::regclass`,
        )
      ).rows[0]?.n ?? 0,
    );
  try {
    await c.query('BEGIN');
    const before = await read();
    await call(c);
    return (await read()) - before;
  } finally {
    await c.query('ROLLBACK');
    await c.end();
  }
}

const enqueue = (queue: string, n: number) =>
  db.pool.query(
    `INSERT INTO ${s}.jobs (task, payload, queue, tenant) SELECT 'work', 'null', $1, 'a' FROM generate_series(1, $2::int)`,
    [queue, n],
  );

/** A job's state while it is in `jobs` (undefined once finished). */
const stateOf = async (id: string | undefined) =>
  (await db.rows<{ state: string }>('SELECT state::text FROM $schema.jobs WHERE id = $1', [id]))[0]?.state;

/** A job leased through fetch_jobs whose lease has run out; its id. */
async function leaseRunOut(queue: string): Promise<string> {
  await enqueue(queue, 1);
  const [job] = (await db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.fetch_jobs(1, 3600000, $1)`, [queue]))
    .rows;
  if (!job) throw new Error('nothing leased');
  await db.pool.query(`UPDATE ${s}.jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, [job.id]);
  return job.id;
}

const claim = (queue: string, limit: number, on: pg.ClientBase | pg.Pool = db.pool) =>
  on.query<{ id: string; lease_token: string }>(`SELECT id, lease_token FROM ${s}.claim_jobs(NULL, $1, 3600000, $2)`, [
    limit,
    [queue],
  ]);

beforeAll(async () => {
  // the statistics stay those of a quiet table (no job running), as after an ANALYZE
  // in a quiet spell: no autovacuum changes them while the tests run
  await db.pool.query(`ALTER TABLE ${s}.jobs SET (autovacuum_enabled = false)`);
});

describe('reads bounded by what they need', () => {
  it('heartbeats, completions and retries read their own jobs, not every running one', async () => {
    await enqueue('busy', 3000);
    await db.pool.query(`ANALYZE ${s}.jobs`);
    const held = (await claim('busy', 3000)).rows;
    expect(held).toHaveLength(3000);
    const [one] = held;
    if (!one) throw new Error('no job claimed');
    const job = [{ id: Number(one.id), token: Number(one.lease_token) }];

    // a heartbeat holding no job (an idle worker's, every few seconds) reads none
    expect(await jobsRowsRead((c) => c.query(`SELECT * FROM ${s}.heartbeat(0, '{}', '{}', 30000)`))).toBe(0);
    expect(
      await jobsRowsRead((c) =>
        c.query(`SELECT * FROM ${s}.heartbeat(0, $1, $2, 30000)`, [[one.id], [one.lease_token]]),
      ),
    ).toBeLessThanOrEqual(3);
    expect(
      await jobsRowsRead((c) =>
        c.query(`SELECT * FROM ${s}.set_progress($1, $2, $3)`, [[one.id], [one.lease_token], [{ done: 1 }]]),
      ),
    ).toBeLessThanOrEqual(3);
    expect(
      await jobsRowsRead((c) => c.query(`SELECT * FROM ${s}.finish_jobs('succeeded', $1)`, [JSON.stringify(job)])),
    ).toBeLessThanOrEqual(3);
    expect(
      await jobsRowsRead((c) => c.query(`SELECT * FROM ${s}.requeue_jobs($1)`, [JSON.stringify(job)])),
    ).toBeLessThanOrEqual(3);
  });

  it("a claim reads the lane from its mark: the jobs enqueued since the mark's snapshot, after it, are not read twice", async () => {
    await enqueue('marked', 20);
    expect((await claim('marked', 10)).rows).toHaveLength(10); // the lane's mark: after job 10, at this snapshot
    await enqueue('marked', 3000); // arrivals since the mark's snapshot, all after the mark
    // the look at arrived pairs, which the upkeep or any claim takes, has seen them
    await db.pool.query(`SELECT ${s}.take_up_arrivals()`);
    let ids: string[] = [];
    const read = await jobsRowsRead(async (c) => {
      ids = (await claim('marked', 10, c)).rows.map((r) => r.id);
    });
    const lane = await db.rows<{ id: string }>(
      `SELECT id::text FROM $schema.jobs WHERE queue = 'marked' ORDER BY id OFFSET 10 LIMIT 10`,
    );
    expect(ids).toEqual(lane.map((r) => r.id)); // FIFO: the next ten
    // the ten jobs, the next one after them (the new mark's check) and the lane's first
    // look: not the 3 000 arrivals, which the claim read once and its marks once per lane
    expect(read).toBeLessThan(100);
  });
});

describe('the search for lost jobs, paced by its cost', () => {
  // A pass's search for lost jobs reads every running job: while a horizon is pinned, with
  // every job that ran since. Once a search took over 100 ms, the next waits 10 times as
  // long; a dead worker's jobs are searched for at once all the same. The pace is set
  // here as a slow search would leave it.
  const pace = (agoMs: number, searchMs: number) =>
    db.pool.query(
      `UPDATE ${s}.lane_prune SET reap_searched_at = now() - $1 * interval '1 millisecond', reap_search_ms = $2`,
      [agoMs, searchMs],
    );
  // no grace after a server start (reap's own rule, not what these test): a server that
  // started a moment ago (the embedded one, this file run alone) would give it 10 s
  const reap = async () =>
    (await db.pool.query<{ released: number }>(`SELECT released FROM ${s}.reap(0)`)).rows[0]?.released;

  it('after a slow search, a run-out lease waits for the next search; a dead worker does not', async () => {
    const a = await leaseRunOut('paced-a');
    await pace(0, 1000); // a search of 1 s just now: the next one in 10 s
    expect(await reap()).toBe(0);
    expect(await stateOf(a)).toBe('running');
    await pace(5_000, 1000);
    expect(await reap()).toBe(0);
    await pace(10_500, 1000);
    expect(await reap()).toBe(1);
    expect(await stateOf(a)).toBe('available');

    // a worker whose lock is gone (no session holds it): dead, and its job searched for
    // at once, with the run-out lease beside it
    const b = await leaseRunOut('paced-b');
    const [worker] = await db.rows<{ id: number }>(
      `INSERT INTO $schema.workers (name, host, pid, concurrency, version, heartbeat_at)
       VALUES ('gone', 'h', 1, 1, 'x', now() - interval '5 seconds') RETURNING id`,
    );
    await enqueue('paced-c', 1);
    const [c] = (
      await db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.claim_jobs($1, 1, 60000, '{paced-c}')`, [
        worker?.id,
      ])
    ).rows;
    await pace(0, 1000);
    expect(await reap()).toBe(2);
    expect(await stateOf(b)).toBe('available');
    expect(await stateOf(c?.id)).toBe('available');
  });

  it('a search records its cost; a quick one (under 100 ms) runs every pass, as before; a clock gone back is due', async () => {
    await db.pool.query(`UPDATE ${s}.lane_prune SET reap_searched_at = NULL, reap_search_ms = 0`);
    await reap();
    const [after] = await db.rows<{ at: Date | null; ms: number; recent: boolean }>(
      `SELECT reap_searched_at AS at, reap_search_ms AS ms, reap_searched_at > now() - interval '1 minute' AS recent
       FROM $schema.lane_prune`,
    );
    expect(after?.recent).toBe(true);
    expect(after?.ms).toBeGreaterThanOrEqual(0);
    expect(after?.ms).toBeLessThan(60_000);

    const d = await leaseRunOut('paced-d');
    await pace(0, 99);
    expect(await reap()).toBe(1);
    expect(await stateOf(d)).toBe('available');

    const e = await leaseRunOut('paced-e');
    await pace(-60_000, 1000); // searched "a minute from now": the clock went back
    expect(await reap()).toBe(1);
    expect(await stateOf(e)).toBe('available');
  });
});

describe("the lease API's search for run-out leases, paced by its cost", () => {
  // fetch_jobs gives back run-out leases itself (consumers may run with no Tusk process);
  // its search reads jobs_running too. Each queue and tenant asked for keeps a pace: every
  // fetch searches while a search is quick (under 5 ms), and after a slow one the next
  // waits 10 times as long. The pace is set here as a slow search leaves it, for a fetch
  // of the queue and any tenant ('=' and the queue, '*'). Returns the record's seq.
  const pace = async (queue: string, agoMs: number, searchMs: number) =>
    (
      await db.rows<{ seq: string }>(
        `INSERT INTO $schema.fetch_searches (queue, tenant, at, ms)
         VALUES ('=' || $1, '*', now() - $2 * interval '1 millisecond', $3) RETURNING seq::text`,
        [queue, agoMs, searchMs],
      )
    )[0]?.seq;
  // a fetch of no job: the search and the promotion only
  const fetchNone = (queue: string, on: pg.ClientBase | pg.Pool = db.pool) =>
    on.query(`SELECT id FROM ${s}.fetch_jobs(0, 3600000, $1)`, [queue]);
  /** The records of a fetch of `queue` (any tenant), after `since` if given. */
  const records = (queue: string, since = '0') =>
    db.rows<{ ms: number }>(
      `SELECT ms FROM $schema.fetch_searches WHERE queue = '=' || $1 AND tenant = '*' AND seq > $2 ORDER BY seq`,
      [queue, since],
    );

  /** The promotion's pace (one for every fetch, key '!promote'), set as a promotion of `ms` `agoMs` ago leaves it. */
  const promotion = (agoMs: number, ms: number) =>
    db.pool.query(
      `INSERT INTO ${s}.fetch_searches (queue, tenant, at, ms)
       VALUES ('!promote', '*', now() - $1 * interval '1 millisecond', $2)`,
      [agoMs, ms],
    );

  it('a quick search runs on every fetch; after a slow one, a run-out lease waits for the next search', async () => {
    const a = await leaseRunOut('fetch-paced-a');
    await pace('fetch-paced-a', 0, 2);
    await fetchNone('fetch-paced-a');
    expect(await stateOf(a)).toBe('available');

    const b = await leaseRunOut('fetch-paced-b');
    await pace('fetch-paced-b', 0, 1000); // a search of 1 s just now: the next one in 10 s
    await fetchNone('fetch-paced-b');
    expect(await stateOf(b)).toBe('running');
    await pace('fetch-paced-b', 5_000, 1000);
    await fetchNone('fetch-paced-b');
    expect(await stateOf(b)).toBe('running');
    // another queue's pace is its own: its run-out lease goes back at once
    const other = await leaseRunOut('fetch-paced-other');
    await fetchNone('fetch-paced-other');
    expect(await stateOf(other)).toBe('available');
    const last = await pace('fetch-paced-b', 10_500, 1000);
    await fetchNone('fetch-paced-b');
    expect(await stateOf(b)).toBe('available');
    // that search after a slow one recorded its own cost, which sets the next wait
    const recorded = await records('fetch-paced-b', last);
    expect(recorded).toHaveLength(1);
    expect(recorded[0]?.ms).toBeLessThan(1000);
  });

  it('the upkeep deletes the records that no longer set a pace: replaced, older than a minute, or quick', async () => {
    await pace('fetch-kept', 0, 50); // replaced by the next
    await pace('fetch-kept', 0, 60);
    await pace('fetch-old', 61_000, 50); // its wait is over whatever it was
    await pace('fetch-quick', 0, 2); // every fetch searches anyway
    await db.pool.query(`SELECT ${s}.maintain()`);
    expect(await records('fetch-kept')).toEqual([{ ms: 60 }]);
    expect(await records('fetch-old')).toEqual([]);
    expect(await records('fetch-quick')).toEqual([]);
  });

  it("a fetch of all queues and one of a queue named '' keep their own paces", async () => {
    const e = await leaseRunOut('fetch-paced-e');
    // all queues: a slow search just now, so a fetch of all queues is not due for 10 s
    await db.pool.query(`INSERT INTO ${s}.fetch_searches (queue, tenant, at, ms) VALUES ('*', '*', now(), 1000)`);
    await db.pool.query(`SELECT id FROM ${s}.fetch_jobs(0, 3600000)`); // all queues: not due
    expect(await stateOf(e)).toBe('running');
    // a queue no job has: its own pace, due; its search (of every queue: a tenant's slots
    // count its jobs in all of them) gives the run-out lease back
    await fetchNone('');
    expect(await stateOf(e)).toBe('available');
    const [all] = await db.rows<{ ms: number }>(
      `SELECT ms FROM $schema.fetch_searches WHERE queue = '*' AND tenant = '*' ORDER BY seq DESC LIMIT 1`,
    );
    expect(all?.ms).toBe(1000); // the pace of all queues is where it was
  });

  it('one fetch of a queue searches at a time: while another holds the search, a due fetch leaves the lease', async () => {
    const c = await leaseRunOut('fetch-paced-c');
    await pace('fetch-paced-c', 10_500, 1000);
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query(
        "SELECT pg_advisory_xact_lock(hashtext($1 || ':lost-leases'), hashtext('=' || $2 || E'\\x1f' || '*'))",
        [db.schema, 'fetch-paced-c'],
      );
      await fetchNone('fetch-paced-c');
      expect(await stateOf(c)).toBe('running');
      await other.query('ROLLBACK');
      await fetchNone('fetch-paced-c');
      expect(await stateOf(c)).toBe('available');
    } finally {
      await other.end();
    }
  });

  it('the promotion of due jobs is paced the same way, for every fetch; the upkeep promotes whatever the pace', async () => {
    // a delayed job that came due a second ago
    const due = async () =>
      (
        await db.rows<{ id: string }>(
          `INSERT INTO $schema.jobs (task, payload, queue, tenant, state, run_at)
           VALUES ('work', 'null', 'promote-paced', 'a', 'scheduled', now() - interval '1 second') RETURNING id::text`,
        )
      )[0]?.id;
    // the wait after a slow promotion over (whatever earlier fetches recorded): due, of any queue
    await promotion(10_500, 1000);
    const a = await due();
    await fetchNone('promote-paced-other');
    expect(await stateOf(a)).toBe('available');

    await promotion(0, 1000); // a promotion of 1 s just now: the next one in 10 s
    const b = await due();
    await fetchNone('promote-paced-other');
    await db.pool.query(`SELECT id FROM ${s}.fetch_jobs(0, 3600000)`); // nor a fetch of all queues
    expect(await stateOf(b)).toBe('scheduled');
    await promotion(10_500, 1000);
    await fetchNone('promote-paced-other');
    expect(await stateOf(b)).toBe('available');

    await promotion(0, 1000);
    const c = await due();
    await db.pool.query(`SELECT ${s}.maintain()`);
    expect(await stateOf(c)).toBe('available');
  });

  it("a session's first fetch records no promotion pace: its time includes making the session's plans", async () => {
    await promotion(10_500, 1000);
    const count = async () =>
      Number(
        (await db.rows<{ n: string }>(`SELECT count(*) AS n FROM $schema.fetch_searches WHERE queue = '!promote'`))[0]
          ?.n,
      );
    const before = await count();
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      await fetchNone('promote-first', c); // due, promotes; records nothing
      expect(await count()).toBe(before);
      await fetchNone('promote-first', c); // due still: records its own, quick after a slow one
      expect(await count()).toBe(before + 1);
    } finally {
      await c.end();
    }
  });

  it('a promotion of a whole batch is not slow: the next fetch promotes the rest', async () => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // a session's first fetch records no promotion pace (its time includes its plans)
      await fetchNone('promote-batch-other', c);
      await db.pool.query(
        `INSERT INTO ${s}.jobs (task, payload, queue, tenant, state, run_at)
         SELECT 'work', 'null', 'promote-batch', 'a', 'scheduled', now() - interval '1 second'
         FROM generate_series(1, 1500)`,
      );
      // the wait after a slow promotion over
      await promotion(10_500, 1000);
      const scheduled = async () =>
        Number(
          (
            await db.rows<{ n: string }>(
              `SELECT count(*) AS n FROM $schema.jobs WHERE queue = 'promote-batch' AND state = 'scheduled'`,
            )
          )[0]?.n,
        );
      await fetchNone('promote-batch-other', c); // 1 000 of them, however long it took
      expect(await scheduled()).toBe(500);
      await fetchNone('promote-batch-other', c);
      expect(await scheduled()).toBe(0);
    } finally {
      await c.end();
    }
  });

  it("the upkeep does not wait for a consumer's open transaction that fetched and recorded its search", async () => {
    const d = await leaseRunOut('fetch-paced-d');
    await pace('fetch-paced-d', 10_500, 1000);
    // the upkeep's own pace as slow: a fetch that wrote there would hold its row
    await db.pool.query(
      `UPDATE ${s}.lane_prune SET reap_searched_at = now() - interval '10500 milliseconds', reap_search_ms = 1000`,
    );
    const consumer = new pg.Client({ connectionString: db.url });
    const upkeep = new pg.Client({ connectionString: db.url });
    await consumer.connect();
    await upkeep.connect();
    try {
      // waiting for a row or a lock would end in this error, not in an answer
      await upkeep.query(`SET lock_timeout = '2s'`);
      // a consumer fetches in its own transaction (the search recorded), and works on
      await consumer.query('BEGIN');
      await fetchNone('fetch-paced-d', consumer);
      const [pass] = (await upkeep.query<{ r: { errors: unknown[] } }>(`SELECT ${s}.maintain() AS r`)).rows;
      expect(pass?.r.errors).toEqual([]);
      await consumer.query('COMMIT');
      expect(await stateOf(d)).toBe('available');
    } finally {
      await consumer.end();
      await upkeep.end();
    }
  });
});

describe('a worker whose lock is gone', () => {
  it('is given a second from its last beat to register again; then its jobs go back', async () => {
    // its lock is held by no session: its listening connection was cut
    const [worker] = await db.rows<{ id: number }>(
      `INSERT INTO $schema.workers (name, host, pid, concurrency, version) VALUES ('cut', 'h', 1, 1, 'x') RETURNING id`,
    );
    await enqueue('cut', 1);
    const [job] = (
      await db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.claim_jobs($1, 1, 3600000, '{cut}')`, [worker?.id])
    ).rows;
    await db.pool.query(`SELECT * FROM ${s}.reap()`); // beat just now: reconnecting, not dead
    expect(await stateOf(job?.id)).toBe('running');
    expect(await db.rows('SELECT 1 FROM $schema.workers WHERE id = $1', [worker?.id])).toHaveLength(1);
    await db.pool.query(`UPDATE ${s}.workers SET heartbeat_at = now() - interval '1100 milliseconds' WHERE id = $1`, [
      worker?.id,
    ]);
    await db.pool.query(`SELECT * FROM ${s}.reap()`);
    expect(await stateOf(job?.id)).toBe('available');
    expect(await db.rows('SELECT 1 FROM $schema.workers WHERE id = $1', [worker?.id])).toHaveLength(0);
  });

  it('but that registered again under another id keeps the jobs its heartbeats hold', async () => {
    // its old lock outlived its listening connection (a half-open socket the server had not
    // yet dropped), so it registered under a new id; its heartbeats carry its jobs' tokens
    const [old] = await db.rows<{ id: number }>(
      `INSERT INTO $schema.workers (name, host, pid, concurrency, version) VALUES ('old', 'h', 1, 1, 'x') RETURNING id`,
    );
    await enqueue('adopted', 1);
    const [job] = (
      await db.pool.query<{ id: string; token: string }>(
        `SELECT id::text, lease_token::text AS token FROM ${s}.claim_jobs($1, 1, 3600000, '{adopted}')`,
        [old?.id],
      )
    ).rows;
    const again = new pg.Client({ connectionString: db.url });
    await again.connect();
    try {
      const [{ id }] = (
        await again.query<{ id: number }>(
          `SELECT ${s}.register_worker(NULL, 'again', 'h', 1, '{adopted}', 1, 'x') AS id`,
        )
      ).rows as [{ id: number }];
      const [beat] = (
        await again.query<{ lost: string[] }>(`SELECT lost FROM ${s}.heartbeat($1, $2, $3, 3600000)`, [
          id,
          [job?.id],
          [job?.token],
        ])
      ).rows;
      expect(beat?.lost).toEqual([]);
      // the server drops the old connection: the old id is dead a second after its last beat
      await db.pool.query(`UPDATE ${s}.workers SET heartbeat_at = now() - interval '1100 milliseconds' WHERE id = $1`, [
        old?.id,
      ]);
      await db.pool.query(`SELECT * FROM ${s}.reap()`);
      expect(await stateOf(job?.id)).toBe('running');
      expect(await db.rows('SELECT locked_by FROM $schema.jobs WHERE id = $1', [job?.id])).toEqual([{ locked_by: id }]);
      expect(await db.rows('SELECT 1 FROM $schema.workers WHERE id = $1', [old?.id])).toHaveLength(0);
    } finally {
      await again.end();
    }
  });
});
