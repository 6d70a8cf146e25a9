// History day partitions made while completions go on and while another upkeep runs: each
// interleaving forced with real sessions (a row lock or a transaction held open), 3 times.
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { eventually, useSessions, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const DAY = 24 * 3600_000;
const ROUNDS = 3;

// a connection of its own, for transactions held open across steps; ended after each test,
// passed or not: a transaction left open would hold the next test up
const session = useSessions(() => db.url);

/** The server process of a session (known from its connection: asking would queue behind its query). */
const pidOf = (c: pg.Client) => (c as unknown as { processID: number }).processID;

const waitingForLock = async (pid: number) =>
  (await db.rows(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [pid])).length > 0;

/** Waits until `pid` waits for a lock (so the interleaving a test forces has happened). */
const waitsForLock = (pid: number) => eventually(() => waitingForLock(pid), 10_000, 5, `session ${pid} waiting`);

/** Whichever comes first: `query` settling, or its session waiting for a lock. */
async function doneOrWaiting(pid: number, query: Promise<unknown>): Promise<'done' | 'waiting'> {
  let settled = false;
  void query.then(
    () => (settled = true),
    () => (settled = true),
  );
  return eventually(async () => (settled ? 'done' : (await waitingForLock(pid)) ? 'waiting' : null), 10_000, 5);
}

/** The locks `pid` holds on job_history that a completion's insert would wait for. */
const locksCompletionsWaitFor = (pid: number) =>
  db.rows(
    `SELECT mode FROM pg_locks WHERE pid = $1 AND relation = $2::regclass
       AND mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')`,
    [pid, `"${db.schema}".job_history`],
  );

/** A UTC day `daysAgo` days back: its partition's name and a time within it. */
function pastDay(daysAgo: number, now = Date.now()): { part: string; at: (hour: number) => string } {
  const day = new Date(now - daysAgo * DAY).toISOString().slice(0, 10);
  return {
    part: `job_history_${day.replaceAll('-', '')}`,
    at: (hour) => `${day}T${String(hour).padStart(2, '0')}:00Z`,
  };
}

/** A finished job, written as a completion writes it (into job_history, which routes it). */
const finishSql = (schema: string) =>
  `INSERT INTO "${schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
     max_attempts, concurrency_key, created_at, run_at, started_at, finished_at)
   VALUES ($1, 'races', 'hist', 'done', 'null', 0, 'succeeded', 1, 5, '', $2, $2, $2, $2)`;

/** Where the rows of `ids` are: partition name by id. */
async function placeOf(ids: number[]): Promise<Record<string, string>> {
  const rows = await db.rows<{ id: string; part: string }>(
    `SELECT id::text, tableoid::regclass::text AS part FROM $schema.job_history WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  return Object.fromEntries(rows.map((r) => [r.id, r.part.replace(/^.*\./, '')]));
}

type Upkeep = { errors: unknown[]; partitions: number };

describe('history partitions made under concurrency', () => {
  it("rows of the day committed into the default partition during the move are moved too (the ATTACH failed on them, undoing the upkeep's pass)", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const { part, at } = pastDay(10 + round);
      const [first, second, late] = [1, 2, 3].map((n) => 1_000_000 + round * 10 + n) as [number, number, number];
      await db.pool.query(finishSql(db.schema), [first, at(1)]);
      await db.pool.query(finishSql(db.schema), [second, at(2)]);
      const [holder, upkeep] = [await session(), await session()];
      // the move's DELETE takes its snapshot, then waits for this row lock
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${db.schema}".job_history_default WHERE id = $1 FOR UPDATE`, [first]);
      const pass = upkeep.query(`SELECT "${db.schema}".maintain_history() AS r`);
      pass.catch(() => {});
      await waitsForLock(pidOf(upkeep));
      // a completion of that day commits into the default partition after the move's snapshot
      await db.pool.query(finishSql(db.schema), [late, at(3)]);
      await holder.query('COMMIT');
      await pass;
      expect(await placeOf([first, second, late])).toEqual({
        [String(first)]: part,
        [String(second)]: part,
        [String(late)]: part,
      });
    }
  });

  it('a completion of the day written while the new partition is not yet committed waits and lands in it (it went to the default partition and failed)', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const { part, at } = pastDay(13 + round);
      const [stray, late] = [1, 2].map((n) => 2_000_000 + round * 10 + n) as [number, number];
      await db.pool.query(finishSql(db.schema), [stray, at(1)]);
      const [upkeep, completion] = [await session(), await session()];
      await upkeep.query('BEGIN');
      await upkeep.query(`SELECT "${db.schema}".maintain_history() AS r`); // made, moved, attached: not committed
      const write = completion.query(finishSql(db.schema), [late, at(2)]);
      write.catch(() => {});
      await waitsForLock(pidOf(completion));
      await upkeep.query('COMMIT');
      await write;
      expect(await placeOf([stray, late])).toEqual({ [String(stray)]: part, [String(late)]: part });
    }
  });

  it("an upkeep pass while another is under way does nothing at once (it waited for the other's new table, which then failed to attach)", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const { part, at } = pastDay(16 + round);
      const [first, second] = [1, 2].map((n) => 3_000_000 + round * 10 + n) as [number, number];
      await db.pool.query(finishSql(db.schema), [first, at(1)]);
      await db.pool.query(finishSql(db.schema), [second, at(2)]);
      const [holder, history, queue] = [await session(), await session(), await session()];
      // the history upkeep stops in the middle of its move
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${db.schema}".job_history_default WHERE id = $1 FOR UPDATE`, [first]);
      const pass = history.query(`SELECT "${db.schema}".maintain_history() AS r`);
      pass.catch(() => {});
      await waitsForLock(pidOf(history));
      // the queue's upkeep runs meanwhile, in another process
      const other = queue.query<{ r: Upkeep }>(`SELECT "${db.schema}".maintain() AS r`);
      other.catch(() => {});
      const otherWas = await doneOrWaiting(pidOf(queue), other);
      await holder.query('COMMIT');
      const [done, otherDone] = [await pass, await other];
      expect(otherWas).toBe('done');
      expect(otherDone.rows[0]?.r).toMatchObject({ errors: [], partitions: 0 });
      expect(done.rows[0].r.created).toBeGreaterThanOrEqual(1); // the day, made by the pass that began it
      expect(await placeOf([first, second])).toEqual({ [String(first)]: part, [String(second)]: part });
    }
  });

  it('an upkeep pass that runs while another has made the day, not yet committed, finds it made (no duplicate table)', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const { part, at } = pastDay(19 + round);
      const stray = 4_000_000 + round * 10;
      await db.pool.query(finishSql(db.schema), [stray, at(1)]);
      const [history, queue] = [await session(), await session()];
      await history.query('BEGIN');
      await history.query(`SELECT "${db.schema}".maintain_history() AS r`);
      const other = queue.query<{ r: Upkeep }>(`SELECT "${db.schema}".maintain() AS r`);
      other.catch(() => {});
      await doneOrWaiting(pidOf(queue), other); // before the commit, whether it waits for it or not
      await history.query('COMMIT');
      expect((await other).rows[0]?.r).toMatchObject({ errors: [], partitions: 0 });
      expect(await placeOf([stray])).toEqual({ [String(stray)]: part });
    }
  });

  it("a pass makes one day from the default partition's rows, the next pass the next day (its move ran under the first day's lock)", async () => {
    const [older, newer] = [pastDay(26), pastDay(25)];
    const [a, b] = [5_000_001, 5_000_002];
    await db.pool.query(finishSql(db.schema), [a, older.at(1)]);
    await db.pool.query(finishSql(db.schema), [b, newer.at(1)]);
    await db.pool.query(`SELECT "${db.schema}".maintain_history()`);
    expect(await placeOf([a, b])).toEqual({ [String(a)]: older.part, [String(b)]: 'job_history_default' });
    await db.pool.query(`SELECT "${db.schema}".maintain_history()`);
    expect(await placeOf([a, b])).toEqual({ [String(a)]: older.part, [String(b)]: newer.part });
  });

  it("the queue's upkeep makes partitions after its other steps: a step that waits holds no lock on job_history", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const { part, at } = pastDay(30 + round);
      const stray = 6_000_000 + round * 10;
      await db.pool.query(finishSql(db.schema), [stray, at(1)]);
      // a search record the upkeep prunes, held by another session: that step waits for it
      const seq = 9_000_000 + round;
      await db.pool.query(
        `INSERT INTO "${db.schema}".fetch_searches (seq, queue, tenant, at, ms)
         VALUES ($1, 'hist', 'races', now() - interval '1 hour', 1)`,
        [seq],
      );
      const [holder, upkeep] = [await session(), await session()];
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${db.schema}".fetch_searches WHERE seq = $1 FOR UPDATE`, [seq]);
      const pass = upkeep.query<{ r: Upkeep }>(`SELECT "${db.schema}".maintain() AS r`);
      pass.catch(() => {});
      await waitsForLock(pidOf(upkeep));
      // before, the day was made first, and completions waited on this step too
      const held = await locksCompletionsWaitFor(pidOf(upkeep));
      await holder.query('COMMIT');
      expect(held).toEqual([]);
      expect((await pass).rows[0]?.r).toMatchObject({ errors: [], partitions: 1 });
      expect(await placeOf([stray])).toEqual({ [String(stray)]: part });
    }
  });

  it('the history upkeep makes partitions after its pruning: a pruning that waits holds no lock on job_history', async () => {
    // kept 60 days: the rows of days 90 and 91 ago are pruned, the other tests' days kept
    await db.pool.query(`SELECT "${db.schema}".set_retention(NULL, '60 days', false)`);
    try {
      const [a, b] = [7_000_001, 7_000_002];
      await db.pool.query(finishSql(db.schema), [a, pastDay(91).at(1)]);
      await db.pool.query(finishSql(db.schema), [b, pastDay(90).at(1)]);
      const [holder, upkeep] = [await session(), await session()];
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${db.schema}".job_history_default WHERE id = $1 FOR UPDATE`, [b]);
      const pass = upkeep.query(`SELECT "${db.schema}".maintain_history() AS r`);
      pass.catch(() => {});
      await waitsForLock(pidOf(upkeep));
      // before, day 91 was made first (its lock held), then day 90's move waited here
      const held = await locksCompletionsWaitFor(pidOf(upkeep));
      await holder.query('COMMIT');
      await pass;
      expect(held).toEqual([]);
      expect(await placeOf([a, b])).toEqual({});
    } finally {
      await db.pool.query(`SELECT "${db.schema}".set_retention(NULL, NULL, true)`);
    }
  });

  // last: a retention under a day drops the other tests' partitions
  it("prune() returns with a retention under a day while today's rows wait in the default partition; today's partition is made", async () => {
    // one time for the day's name and the row (the test could otherwise straddle a midnight)
    const now = new Date();
    const today = pastDay(0, now.getTime());
    const stray = 8_000_001;
    await db.pool.query(`DROP TABLE IF EXISTS "${db.schema}".${today.part}`);
    await db.pool.query(finishSql(db.schema), [stray, now.toISOString()]);
    await db.pool.query(`SELECT "${db.schema}".set_retention(NULL, '1 hour', false)`);
    try {
      let batches = 0;
      await db.tusk.prune({
        onProgress: () => {
          // before, yesterday's partition was dropped and made again, and `more` never ended
          if (++batches > 20) throw new Error('prune() did not end after 20 batches');
        },
      });
      expect(await placeOf([stray])).toEqual({ [String(stray)]: today.part });
    } finally {
      await db.pool.query(`SELECT "${db.schema}".set_retention(NULL, NULL, true)`);
    }
  });
});
