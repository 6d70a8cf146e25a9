import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type PruneBatch, TuskValidationError } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const DAY = 24 * 3600_000;

/** Day partitions of job_history (names job_history_YYYYMMDD), oldest first. */
async function partitions(): Promise<string[]> {
  const rows = await db.rows<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = '$schema.job_history'::regclass AND c.relname ~ '^job_history_[0-9]{8}$' ORDER BY 1`,
  );
  return rows.map((r) => r.name);
}

const dayName = (msAgo: number) =>
  `job_history_${new Date(Date.now() - msAgo).toISOString().slice(0, 10).replaceAll('-', '')}`;

/** Finished jobs of `tenant`, one every `everyHours` hours over the last `days` days (ids from `firstId`). */
async function insertHistory(tenant: string, days: number, everyHours: number, firstId: number): Promise<number> {
  const { rowCount } = await db.pool.query(
    `INSERT INTO "${db.schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
       max_attempts, concurrency_key, created_at, run_at, started_at, finished_at)
     SELECT $2 + g, $1, 'hist', 'old', jsonb_build_object('g', g), 0, 'succeeded', 1, 5, '', f, f, f, f
     FROM (SELECT g, now() - g * $3 * interval '1 hour' - interval '5 minutes' AS f
           FROM generate_series(0, $4 * 24 / $3) g) x`,
    [tenant, firstId, everyHours, days],
  );
  return rowCount ?? 0;
}

const count = async (tenant: string, olderThanDays = 0) =>
  (
    await db.rows<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.job_history WHERE tenant = $1 AND finished_at < now() - $2 * interval '1 day'`,
      [tenant, olderThanDays],
    )
  )[0]?.n ?? 0;

describe('history partitions and retention', () => {
  it('partitions are created days ahead', async () => {
    const names = await partitions();
    // days counted from the migration's, not from now: a midnight may have passed since
    const [migrated] = await db.rows<{ ms: number }>(
      'SELECT (extract(epoch FROM max(applied_at)) * 1000)::float8 AS ms FROM $schema.migrations',
    );
    const ago = Date.now() - (migrated?.ms ?? Date.now());
    for (const days of [-1, 0, 1, 2, 3]) expect(names).toContain(dayName(ago - days * DAY));
  });

  it('rows of days without a partition (no upkeep ran) are moved into new day partitions', async () => {
    const n = await insertHistory('rot-a', 40, 6, 1_000_000);
    const [stray] = await db.rows<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.job_history_default`);
    expect(stray?.n).toBeGreaterThan(100); // older than yesterday: no partition yet
    await db.tusk.prune();
    expect((await db.rows(`SELECT 1 FROM $schema.job_history_default`)).length).toBe(0);
    expect(await partitions()).toContain(dayName(39 * DAY));
    expect(await count('rot-a')).toBe(n); // no retention yet: nothing removed
    // still found by id and in the tenant's list
    expect((await db.tusk.getJob(1_000_000 + 150))?.tenant).toBe('rot-a');
    const recent = await db.tusk.finishedJobs({ tenant: 'rot-a', limit: 5 });
    expect(recent.map((j) => j.id)).toEqual(['1000000', '1000001', '1000002', '1000003', '1000004']);
    // the last day holds 4 of them: 3 come from its partitions alone, 5 from all of them
    const fewer = await db.tusk.finishedJobs({ tenant: 'rot-a', limit: 3 });
    expect(fewer.map((j) => j.id)).toEqual(['1000000', '1000001', '1000002']);
    const older = await db.tusk.finishedJobs({ tenant: 'rot-a', limit: 2, before: recent[4]?.finishedAt as Date });
    expect(older.map((j) => j.id)).toEqual(['1000005', '1000006']);
  });

  it("pages through a tenant's history by its last job, through jobs finished in the same instant or millisecond", async () => {
    // a completion batch gives all its jobs one finished_at (its transaction's time), and a
    // Date keeps milliseconds of a time stored in microseconds: 7 jobs at .123456, 3 at
    // .123900, 2 a second earlier, in an order their ids do not follow
    const at = ['2026-01-05 10:00:00.123456+00', '2026-01-05 10:00:00.1239+00', '2026-01-05 10:00:00.000001+00'];
    const spec = [0, 0, 1, 0, 2, 0, 1, 0, 1, 0, 2, 0];
    await db.pool.query(
      `INSERT INTO "${db.schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
         max_attempts, concurrency_key, created_at, run_at, started_at, finished_at)
       SELECT 4000000 + g, 'pages', 'hist', 'old', 'null', 0, 'succeeded', 1, 5, '', f, f, f, f
       FROM unnest($1::timestamptz[]) WITH ORDINALITY AS x(f, g)`,
      [spec.map((i) => at[i])],
    );
    const expected = spec
      .map((i, g) => ({ id: String(4000001 + g), at: at[i] as string }))
      .sort((a, b) => (a.at === b.at ? Number(b.id) - Number(a.id) : a.at < b.at ? 1 : -1))
      .map((j) => j.id);
    for (const limit of [1, 4, 5]) {
      const seen: string[] = [];
      let page = await db.tusk.finishedJobs({ tenant: 'pages', limit });
      while (page.length > 0) {
        seen.push(...page.map((j) => j.id));
        page = await db.tusk.finishedJobs({ tenant: 'pages', limit, before: page[page.length - 1] });
      }
      expect(seen, `pages of ${limit}`).toEqual(expected);
    }
    // a date alone: strictly before it (its millisecond's jobs are not)
    const before = new Date('2026-01-05T10:00:00.124Z');
    const page = await db.tusk.finishedJobs({ tenant: 'pages', limit: 20, before });
    expect(page.map((j) => j.id)).toEqual(expected);
    const earlier = await db.tusk.finishedJobs({
      tenant: 'pages',
      limit: 20,
      before: new Date('2026-01-05T10:00:00.123Z'),
    });
    expect(earlier.map((j) => j.id)).toEqual(expected.slice(10));
    // the last job of a page gone before the next (retried, deleted, pruned): the page goes
    // on with the rest of its millisecond, by id (exact for a batch: one instant), then the
    // earlier ones
    const batch = ['2026-01-06 10:00:00.5+00', '2026-01-06 10:00:00.000001+00'];
    await db.pool.query(
      `INSERT INTO "${db.schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
         max_attempts, concurrency_key, created_at, run_at, started_at, finished_at)
       SELECT 5000000 + g, 'pages-gone', 'hist', 'old', 'null', 0, 'succeeded', 1, 5, '', f, f, f, f
       FROM unnest($1::timestamptz[]) WITH ORDINALITY AS x(f, g)`,
      [[1, 0, 0, 0, 1, 0, 0, 0, 0].map((i) => batch[i])],
    );
    const inOrder = ['5000009', '5000008', '5000007', '5000006', '5000004', '5000003', '5000002', '5000005', '5000001'];
    const first = await db.tusk.finishedJobs({ tenant: 'pages-gone', limit: 3 });
    const last = first[2] as (typeof first)[number];
    await db.pool.query(`DELETE FROM "${db.schema}".job_history WHERE id = $1`, [last.id]);
    const next = await db.tusk.finishedJobs({ tenant: 'pages-gone', limit: 20, before: last });
    expect([...first, ...next].map((j) => j.id)).toEqual(inOrder);
    await expect(db.rows(`SELECT * FROM $schema.finished_jobs('pages', 5, NULL, 4000001)`)).rejects.toThrow(
      /p_before_id needs p_before/,
    );
    // after the lowest id of an instant: the jobs of the instants before
    const below = await db.tusk.finishedJobs({
      tenant: 'pages',
      limit: 20,
      before: { id: '4000001', finishedAt: new Date('2026-01-05T10:00:00.123Z') },
    });
    expect(below.map((j) => j.id)).toEqual(expected.slice(10));
    await expect(
      db.tusk.finishedJobs({ tenant: 'pages', before: { id: 'x', finishedAt: null } as never }),
    ).rejects.toThrow(/^options\.before/);
  });

  it('retention drops whole partitions past the longest retention; shorter tenants lose rows in batches', async () => {
    await insertHistory('rot-b', 40, 6, 2_000_000);
    await insertHistory('rot-short', 40, 6, 3_000_000);
    await db.tusk.tenants.set('rot-short', { retention: '5 days' });
    await db.tusk.tenants.setDefault({ retention: '30 days' });
    expect(await db.tusk.tenants.get('rot-short'))?.toMatchObject({ retention: '5 days', ownRetention: '5 days' });
    expect(await db.tusk.tenants.getDefault()).toEqual({ slots: null, retention: '30 days' });
    expect(await db.tusk.tenants.set('rot-b', {})).toMatchObject({ retention: '30 days', ownRetention: null });

    const batches: PruneBatch[] = [];
    const total = await db.tusk.prune({ batch: 20, onProgress: (b) => batches.push(b) });
    expect(total.dropped).toContain(dayName(35 * DAY));
    expect(total.dropped).not.toContain(dayName(20 * DAY));
    expect(await partitions()).not.toContain(dayName(31 * DAY));
    expect(batches.length).toBeGreaterThan(2); // 20 rows at a time
    expect(batches.every((b) => b.deleted <= 20)).toBe(true);
    // the partition holding the cutoff stays whole: at most a day more than the retention
    for (const tenant of ['rot-a', 'rot-b']) {
      expect(await count(tenant, 31)).toBe(0);
      expect(await count(tenant, 29)).toBeGreaterThan(0);
    }
    expect(await count('rot-short', 5)).toBe(0);
    expect(await count('rot-short', 4)).toBeGreaterThan(0);
    expect(await db.tusk.getJob(3_000_000 + 30)).toBeNull(); // 7.5 days old
    expect((await db.tusk.prune()).deleted).toBe(0); // nothing left to do
  });

  it('a tenant kept longer than the default keeps the partitions; the others lose their rows past the default', async () => {
    await insertHistory('rot-long', 40, 6, 4_000_000);
    await insertHistory('rot-c', 40, 6, 5_000_000);
    await db.tusk.tenants.setDefault({ retention: '10 days' });
    await db.tusk.tenants.set('rot-long', { retention: '20 days' });
    const { dropped } = await db.tusk.prune({ batch: 1000 });
    expect(dropped).toContain(dayName(22 * DAY));
    expect(await partitions()).toContain(dayName(15 * DAY));
    expect(await count('rot-long', 21)).toBe(0);
    expect(await count('rot-long', 15)).toBeGreaterThan(0);
    for (const tenant of ['rot-c', 'rot-a']) {
      expect(await count(tenant, 10)).toBe(0);
      expect(await count(tenant, 9)).toBeGreaterThan(0);
    }
    await db.tusk.tenants.set('rot-long', { retention: null });
    expect((await db.tusk.tenants.get('rot-long'))?.retention).toBe('10 days');
  });

  it('one process at a time: a second upkeep while one runs does nothing', async () => {
    const a = new pg.Client({ connectionString: db.url });
    await a.connect();
    try {
      await a.query('BEGIN');
      const first = await a.query(`SELECT "${db.schema}".maintain_history() AS r`);
      expect(first.rows[0].r).not.toBeNull();
      const [second] = await db.rows<{ r: unknown }>(`SELECT $schema.maintain_history() AS r`);
      expect(second?.r).toBeNull();
      await a.query('COMMIT');
    } finally {
      await a.end();
    }
  });

  it('a worker applies retention when it starts', async () => {
    await insertHistory('rot-w', 12, 24, 6_000_000);
    await db.tusk.prune(); // partitions for the old days
    await db.tusk.tenants.set('rot-w', { retention: '3 days' });
    expect(await count('rot-w', 3)).toBeGreaterThan(0);
    const worker = db.worker({ tasks: {} });
    await worker.start();
    await eventually(async () => (await count('rot-w', 3)) === 0);
    await worker.stop();
  });

  it('bad retention is refused', async () => {
    const cases: Array<[() => Promise<unknown>, RegExp]> = [
      [() => db.tusk.tenants.set('x', { retention: 'soon' }), /^settings\.retention: must be a period like '30 days'/],
      [() => db.tusk.tenants.set('x', { retention: '0 days' }), /^settings\.retention: must be a period/],
      [() => db.tusk.tenants.set('x', { retention: 30 as never }), /^settings\.retention: must be a period/],
      [() => db.tusk.tenants.setDefault({ retention: '3 fortnights' }), /^settings\.retention/],
      [() => db.tusk.prune({ batch: 0 }), /^options\.batch/],
      [() => db.tusk.finishedJobs({} as never), /^options\.tenant/],
    ];
    for (const [call, message] of cases) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TuskValidationError);
      expect((error as Error).message).toMatch(message);
    }
  });
});

describe("the history's BRIN index on finished_at", () => {
  /** Each partition's index of job_history_finished, with its table and options. */
  const brinIndexes = () =>
    db.rows<{ part: string; index: string; options: string[] | null }>(
      `SELECT t.relname AS part, ic.relname AS index, ic.reloptions AS options
       FROM pg_inherits ii JOIN pg_class ic ON ic.oid = ii.inhrelid
       JOIN pg_index x ON x.indexrelid = ic.oid JOIN pg_class t ON t.oid = x.indrelid
       WHERE ii.inhparent = '$schema.job_history_finished'::regclass ORDER BY 1`,
    );

  it("is summarized by the upkeep's history pass, not at the autovacuum's request (which overflows and is logged)", async () => {
    // rows of the last minutes in finish order, some 25 ranges of 32 pages
    await db.pool.query(
      `INSERT INTO "${db.schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
         max_attempts, concurrency_key, created_at, run_at, started_at, finished_at)
       SELECT 9000000 + g, 'brin', 'hist', 'recent', jsonb_build_object('pad', repeat('x', 200)), 0,
              'succeeded', 1, 5, '', f, f, f, f
       FROM (SELECT g, now() - interval '20 minutes' + g * interval '50 milliseconds' AS f
             FROM generate_series(1, 20000) g) x`,
    );
    // today's partition as one made before 000068: its index asking to be summarized
    const today = dayName(0);
    const own = (await brinIndexes()).find((i) => i.part === today);
    await db.pool.query(`ALTER INDEX "${db.schema}"."${own?.index}" SET (autosummarize = on)`);
    await db.tusk.upkeep().runOnce();
    const indexes = await brinIndexes();
    expect(indexes.length).toBeGreaterThan(5); // the days ahead, and the past days earlier tests made
    for (const i of indexes) expect(i.options ?? []).not.toContain('autosummarize=on');
    // the partitions that take rows: no range left to summarize
    const since = dayName(DAY).slice('job_history_'.length);
    const taking = indexes.filter((i) => i.part === 'job_history_default' || i.part.slice(-8) >= since);
    expect(taking.length).toBeGreaterThanOrEqual(2);
    for (const i of taking) {
      const [left] = await db.rows<{ n: number }>(
        `SELECT brin_summarize_new_values(format('%I.%I', $1::text, $2::text)::regclass) AS n`,
        [db.schema, i.index],
      );
      expect({ index: i.index, left: left?.n }).toEqual({ index: i.index, left: 0 });
    }
  });

  it('a partition made after the migration has autosummarize off as it is made, empty or from stray rows', async () => {
    const ahead = new Date(Date.now() + 10 * DAY).toISOString().slice(0, 10);
    const past = new Date(Date.now() - 50 * DAY).toISOString().slice(0, 10);
    // a row of a day without a partition: in the default one until its day is made (and attached)
    await db.pool.query(
      `INSERT INTO "${db.schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
         max_attempts, concurrency_key, created_at, run_at, started_at, finished_at)
       SELECT 9500000, 'brin-stray', 'hist', 'old', '{}', 0, 'succeeded', 1, 5, '', f, f, f, f
       FROM (SELECT ($1::date + interval '12 hours') AT TIME ZONE 'UTC' AS f) x`,
      [past],
    );
    const partitionOf = async () =>
      (
        await db.rows<{ part: string }>(
          `SELECT tableoid::regclass::text AS part FROM $schema.job_history WHERE id = 9500000`,
        )
      )[0]?.part;
    expect(await partitionOf()).toMatch(/job_history_default$/);
    for (const day of [ahead, past]) {
      const [made] = await db.rows<{ made: boolean }>(`SELECT $schema.create_history_partition($1::date) AS made`, [
        day,
      ]);
      expect(made?.made).toBe(true);
      const name = `job_history_${day.replaceAll('-', '')}`;
      const index = (await brinIndexes()).find((i) => i.part === name);
      expect({ name, options: index?.options }).toEqual({ name, options: ['pages_per_range=32', 'autosummarize=off'] });
    }
    expect(await partitionOf()).toMatch(new RegExp(`job_history_${past.replaceAll('-', '')}$`)); // attached
  });
});
