import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { EnqueueOptions } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

// The SQL producer API (enqueue_job, enqueue_jobs), called as triggers and other
// languages call it: plain SQL on a plain connection.

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;
const count = async () => Number((await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.jobs'))[0]?.n);

const enqueueJob = async (task: unknown, payload?: unknown, options?: unknown): Promise<string> => {
  const { rows } = await db.pool.query<{ id: string }>(`SELECT ${s}.enqueue_job($1, $2, $3) AS id`, [
    task,
    payload === undefined ? 'null' : JSON.stringify(payload),
    options === undefined ? '{}' : JSON.stringify(options),
  ]);
  return rows[0]?.id as string;
};
const enqueueJobs = async (jobs: unknown): Promise<Array<{ id: string; deduplicated: boolean }>> =>
  (await db.pool.query(`SELECT * FROM ${s}.enqueue_jobs($1)`, [JSON.stringify(jobs)])).rows;

/** What a refused call raised: SQLSTATE and message. */
const refusal = async (call: Promise<unknown>): Promise<{ code: string; message: string }> => {
  const error = (await call.then(
    () => null,
    (e: unknown) => e,
  )) as { code: string; message: string } | null;
  expect(error, 'the call was refused').not.toBeNull();
  return { code: error?.code as string, message: error?.message as string };
};

/** A job's row, as written, without what differs from one enqueue to the next. */
const written = async (id: string) => {
  const [row] = await db.rows(
    `SELECT tenant, queue, task, payload, priority, state::text, max_attempts, concurrency_key, expires_at,
            retry, dedup_key, source_type, source_id, source_method,
            run_at, (extract(epoch FROM run_at - created_at) * 1000)::bigint AS delay_ms
     FROM $schema.jobs WHERE id = $1`,
    [id],
  );
  return row;
};

describe('enqueue_job', () => {
  it('each option lands in the job as getJob reports it', async () => {
    const runAt = new Date('2031-02-03T04:05:06.789Z');
    const expiresAt = new Date('2032-01-01T00:00:00Z');
    const id = await enqueueJob(
      'send_welcome',
      { user_id: 42, tags: ['a', 'b'] },
      {
        tenant: 'acme',
        queue: 'mail',
        priority: -7,
        runAt: runAt.toISOString(),
        maxAttempts: 9,
        concurrencyKey: 'user:42',
        expiresAt: '2032-01-01T01:00:00+01:00',
        source: { type: 'user', id: 42, method: 'signup' },
        retry: { backoff: 'exponential', queue: 'mail-retries' },
        dedupKey: 'welcome:42',
        dedupWindowMs: 60_000,
      },
    );
    expect(await db.tusk.getJob(id)).toMatchObject({
      id,
      task: 'send_welcome',
      tenant: 'acme',
      queue: 'mail',
      state: 'scheduled',
      payload: { user_id: 42, tags: ['a', 'b'] },
      priority: -7,
      attempts: 0,
      maxAttempts: 9,
      concurrencyKey: 'user:42',
      runAt,
      expiresAt,
      source: { type: 'user', id: '42', method: 'signup' },
    });
    expect(await written(id)).toMatchObject({
      retry: { backoff: 'exponential', queue: 'mail-retries' },
      dedup_key: 'welcome:42',
    });

    const delayed = await enqueueJob('later', null, { delayMs: 90_000, retry: { maxAttempts: 2, backoff: 1500 } });
    expect(await db.tusk.getJob(delayed)).toMatchObject({ state: 'scheduled', maxAttempts: 2 });
    expect(await written(delayed)).toMatchObject({ delay_ms: '90000', retry: { backoff: 1500 } });
  });

  it('defaults: tenant and queue default, payload null, priority 0, 5 attempts, available now', async () => {
    const { rows } = await db.pool.query<{ id: string }>(`SELECT ${s}.enqueue_job('ping') AS id`);
    const id = rows[0]?.id as string;
    expect(await db.tusk.getJob(id)).toMatchObject({
      tenant: 'default',
      queue: 'default',
      state: 'available',
      payload: null,
      priority: 0,
      maxAttempts: 5,
      concurrencyKey: null,
      expiresAt: null,
      source: null,
    });
    expect(await written(id)).toMatchObject({ retry: null, dedup_key: null, delay_ms: '0' });
  });

  it('writes what the library writes for the same options', async () => {
    const runAt = new Date('2030-06-01T12:00:00.5Z');
    const cases: Array<[EnqueueOptions, Record<string, unknown>]> = [
      [{}, {}],
      [
        { tenant: 'acme', queue: 'q', priority: 32767, maxAttempts: 1000, concurrencyKey: 'k' },
        { tenant: 'acme', queue: 'q', priority: 32767, maxAttempts: 1000, concurrencyKey: 'k' },
      ],
      [
        { runAt, expiresAt: new Date('2031-01-01T00:00:00Z') },
        { runAt: runAt.toISOString(), expiresAt: '2031-01-01T00:00:00Z' },
      ],
      [
        { delayMs: 1234, priority: -32768 },
        { delayMs: 1234, priority: -32768 },
      ],
      [{ retry: { maxAttempts: 3 } }, { retry: { maxAttempts: 3 } }],
      [{ retry: { maxAttempts: 3, backoff: 250 } }, { retry: { maxAttempts: 3, backoff: 250.0 } }],
      [
        { maxAttempts: 4, retry: { maxAttempts: 3, queue: 'r' } },
        { maxAttempts: 4, retry: { maxAttempts: 3, queue: 'r' } },
      ],
      [{ retry: {} }, { retry: {} }],
      [{ source: { type: 'order', id: 'A-1' } }, { source: { type: 'order', id: 'A-1' } }],
      [{ source: { type: 'order', id: 7, method: 'ship' } }, { source: { type: 'order', id: 7, method: 'ship' } }],
      [
        { dedupe: false, dedupWindowMs: 5 },
        { dedupe: false, dedupWindowMs: 5 },
      ],
    ];
    for (const [options, json] of cases) {
      const payload = { n: 1, nested: { list: [1, 'two', null] } };
      const { id: fromLibrary } = await db.tusk.enqueue('mirror', payload, options);
      const fromSql = await enqueueJob('mirror', payload, json);
      // a job's start is either its runAt, or its delay from its enqueue
      const start = ({ run_at, delay_ms, ...rest }: Record<string, unknown> = {}) =>
        options.runAt ? { ...rest, run_at } : { ...rest, delay_ms };
      expect(start(await written(fromSql)), JSON.stringify(json)).toEqual(start(await written(fromLibrary)));
    }
  });

  it('refuses bad input with SQLSTATE 22023 naming the field, and writes nothing', async () => {
    const before = await count();
    const cases: Array<[unknown, unknown, unknown, string]> = [
      ['', null, {}, 'task must not be empty'],
      ['x'.repeat(201), null, {}, 'task must be at most 200 characters'],
      ['a\nb', null, {}, 'task must not contain control characters (U+0000-U+001F, U+007F-U+009F; got "a\\nb")'],
      [null, null, {}, 'task is required'],
      ['t', null, { delay: 5 }, 'options has an unknown option "delay" (did you mean "delayMs"?)'],
      ['t', null, { client: 1 }, 'options has an unknown option "client"'],
      ['t', null, { tenant: '' }, 'options.tenant must not be empty'],
      ['t', null, { tenant: 'x'.repeat(129) }, 'options.tenant must be at most 128 characters'],
      ['t', null, { tenant: null }, 'options.tenant must be a string (got null)'],
      ['t', null, { queue: 5 }, 'options.queue must be a string (got 5)'],
      ['t', null, { queue: 'a\u0085b' }, 'options.queue must not contain control characters'],
      ['t', null, { priority: 32768 }, 'options.priority must be an integer from -32768 to 32767 (got 32768)'],
      ['t', null, { priority: 1.5 }, 'options.priority must be an integer from -32768 to 32767 (got 1.5)'],
      ['t', null, { priority: '1' }, 'options.priority must be a number (got "1")'],
      ['t', null, { maxAttempts: 0 }, 'options.maxAttempts must be an integer from 1 to 1000 (got 0)'],
      ['t', null, { maxAttempts: 1001 }, 'options.maxAttempts must be an integer from 1 to 1000 (got 1001)'],
      ['t', null, { delayMs: -1 }, 'options.delayMs must be an integer from 0 to 3155760000000 (got -1)'],
      ['t', null, { dedupWindowMs: 3155760000001 }, 'options.dedupWindowMs must be an integer from 0 to 3155760000000'],
      ['t', null, { runAt: '2030-01-01' }, 'options.runAt must be an ISO 8601 date-time with a time zone'],
      ['t', null, { runAt: '2030-02-30T00:00:00Z' }, 'options.runAt must be an ISO 8601 date-time with a time zone'],
      ['t', null, { runAt: 1700000000000 }, 'options.runAt must be an ISO 8601 date-time with a time zone'],
      ['t', null, { expiresAt: '9999-12-31T23:00:00-02:00' }, 'options.expiresAt must be in the years 1 to 9999 UTC'],
      ['t', null, { runAt: '2030-01-01T00:00:00Z', delayMs: 1 }, 'options must give runAt or delayMs, not both'],
      ['t', null, { concurrencyKey: '' }, 'options.concurrencyKey must not be empty'],
      ['t', null, { concurrencyKey: 'k'.repeat(257) }, 'options.concurrencyKey must be at most 256 characters'],
      ['t', null, { dedupKey: 'k'.repeat(513) }, 'options.dedupKey must be at most 512 characters'],
      ['t', null, { dedupe: 'yes' }, 'options.dedupe must be true or false (got "yes")'],
      ['t', null, { dedupe: true }, 'options.dedupe is not available in SQL'],
      ['t', null, { retry: 3 }, 'options.retry must be an object (got 3)'],
      [
        't',
        null,
        { retry: { maxAtempts: 3 } },
        'options.retry has an unknown option "maxAtempts" (did you mean "maxAttempts"?)',
      ],
      ['t', null, { retry: { maxAttempts: 0 } }, 'options.retry.maxAttempts must be an integer from 1 to 1000 (got 0)'],
      ['t', null, { retry: { backoff: 'linear' } }, `options.retry.backoff must be 'exponential' or an integer`],
      ['t', null, { retry: { backoff: -1 } }, `options.retry.backoff must be 'exponential' or an integer`],
      ['t', null, { retry: { queue: '' } }, 'options.retry.queue must not be empty'],
      ['t', null, { source: { id: 1 } }, 'options.source.type is required'],
      [
        't',
        null,
        { source: { type: 'x', id: 1.5 } },
        'options.source.id must be a string of 1 to 256 characters or an integer',
      ],
      ['t', null, { source: { type: 'x', id: 2 ** 53 } }, 'options.source.id must be a string of 1 to 256 characters'],
      ['t', null, { source: { type: 'x', id: '' } }, 'options.source.id must be a string of 1 to 256 characters'],
      ['t', null, { source: { type: 'x', id: 1, kind: 2 } }, 'options.source has an unknown option "kind"'],
      ['t', null, [], 'options must be an object (got an array)'],
      ['t', { s: 'x'.repeat(1024 * 1024) }, {}, 'payload is 1048585 bytes as JSON, over the limit of 1048576'],
      [
        't',
        JSON.parse(`${'['.repeat(1001)}${']'.repeat(1001)}`),
        {},
        'payload must not be nested deeper than 1000 levels',
      ],
    ];
    for (const [task, payload, options, message] of cases) {
      const error = await refusal(enqueueJob(task, payload, options));
      expect(error.code, message).toBe('22023');
      expect(error.message).toContain(`tusk: ${message}`);
    }
    expect(await count()).toBe(before);
    // at the limits: accepted
    const nested = JSON.parse(`${'['.repeat(1000)}${']'.repeat(1000)}`);
    await enqueueJob('t'.repeat(200), nested, { tenant: 't'.repeat(128), priority: -32768, maxAttempts: 1000 });
    expect(await count()).toBe(before + 1);
  });

  it('NUL characters are refused by PostgreSQL before any job is written', async () => {
    const before = await count();
    // neither text nor jsonb can hold NUL: the call fails as its arguments are read
    const inPayload = await refusal(enqueueJob('t', { s: 'a\u0000b' }));
    expect(inPayload.message).toMatch(/unsupported Unicode escape sequence/);
    const inName = await refusal(enqueueJob('t', null, { queue: 'a\u0000b' }));
    expect(inName.message).toMatch(/unsupported Unicode escape sequence/);
    const inTask = await refusal(enqueueJob('a\u0000b'));
    expect(inTask.message).toMatch(/invalid byte sequence/);
    expect(await count()).toBe(before);
  });

  it('a dedup key returns the existing job, also against the library and enqueue_jobs', async () => {
    const first = await enqueueJob('report', { day: 1 }, { tenant: 'acme', dedupKey: 'report:1' });
    expect(await enqueueJob('report', { day: 1 }, { tenant: 'acme', dedupKey: 'report:1' })).toBe(first);
    expect(await db.tusk.enqueue('report', { day: 1 }, { tenant: 'acme', dedupKey: 'report:1' })).toEqual({
      id: first,
      deduplicated: true,
    });
    // another tenant: its own job
    expect(await enqueueJob('report', { day: 1 }, { tenant: 'other', dedupKey: 'report:1' })).not.toBe(first);
    // dedupe: true with a dedupKey uses the key, as the library does
    expect(await enqueueJob('report', null, { tenant: 'acme', dedupe: true, dedupKey: 'report:1' })).toBe(first);

    const { id: fromLibrary } = await db.tusk.enqueue('report', {}, { tenant: 'acme', dedupKey: 'report:2' });
    const rows = await enqueueJobs([
      { task: 'report', tenant: 'acme', dedupKey: 'report:2' },
      { task: 'report', tenant: 'acme', dedupKey: 'report:3' },
      { task: 'report', tenant: 'acme', dedupKey: 'report:3' },
      { task: 'plain', tenant: 'acme' },
    ]);
    expect(rows.map((r) => r.deduplicated)).toEqual([true, false, true, false]);
    expect(rows[0]?.id).toBe(fromLibrary);
    expect(rows[2]?.id).toBe(rows[1]?.id);
    expect(Number(rows[3]?.id)).toBeGreaterThan(Number(rows[1]?.id));
  });
});

describe('enqueue_jobs', () => {
  it('returns ids in input order, with or without dedup keys', async () => {
    const tasks = Array.from({ length: 30 }, (_, i) => `task_${(i * 7) % 30}`);
    for (const withKey of [false, true]) {
      const rows = await enqueueJobs(
        tasks.map((task, i) => ({
          task,
          payload: { i },
          priority: 30 - i,
          ...(withKey && i === 10 ? { dedupKey: `order-${i}` } : {}),
        })),
      );
      expect(rows).toHaveLength(tasks.length);
      expect(rows.every((r) => r.deduplicated === false)).toBe(true);
      for (const [i, row] of rows.entries()) {
        expect(await db.tusk.getJob(row.id)).toMatchObject({ task: tasks[i], payload: { i }, priority: 30 - i });
      }
    }
    expect(await enqueueJobs([])).toEqual([]);
  });

  it('refuses a bad entry naming its index, and writes none of the batch', async () => {
    const before = await count();
    const cases: Array<[unknown, string]> = [
      [{ jobs: [] }, 'jobs must be an array (got an object)'],
      [[{ task: 'a' }, 'b'], 'jobs[1] must be an object (got "b")'],
      [[{ task: 'a' }, { task: 'b' }, { task: 'c', queue: '' }], 'jobs[2].queue must not be empty'],
      [[{ task: 'a' }, { payload: 1 }], 'jobs[1].task is required'],
      [[{ task: 'a' }, { task: 'b', tsk: 'c' }], 'jobs[1] has an unknown option "tsk" (did you mean "task"?)'],
      [[{ task: 'a', maxAttempts: 0 }], 'jobs[0].maxAttempts must be an integer from 1 to 1000 (got 0)'],
      [[{ task: 'a' }, { task: 'b', retry: { backoff: 'x' } }], `jobs[1].retry.backoff must be 'exponential'`],
      [
        [
          { task: 'a', dedupKey: 'k' },
          { task: 'b', dedupe: true },
        ],
        'jobs[1].dedupe is not available in SQL',
      ],
      [[{ task: 'a', runAt: '2030-01-01T00:00:00Z', delayMs: 5 }], 'jobs[0] must give runAt or delayMs, not both'],
      [
        [{ task: 'a', payload: JSON.parse(`${'['.repeat(1001)}${']'.repeat(1001)}`) }],
        'jobs[0].payload must not be nested',
      ],
    ];
    for (const [jobs, message] of cases) {
      const error = await refusal(enqueueJobs(jobs));
      expect(error.code, message).toBe('22023');
      expect(error.message).toContain(`tusk: ${message}`);
    }
    expect(await count()).toBe(before);
  });
});

describe('dependencies from SQL', () => {
  it('dependsOn and onDependencyFailure: the job waits as the library makes it wait; bad ids are refused, nothing written', async () => {
    const first = await enqueueJob('make', null, { queue: 'sql-deps' });
    const waiting = await enqueueJob('use', null, { queue: 'sql-deps', dependsOn: [Number(first), first] });
    expect(await db.tusk.getJob(waiting)).toMatchObject({ state: 'scheduled', waitingOn: 1, dependsOn: [first] });
    const [a, b] = await enqueueJobs([
      { task: 'use', dependsOn: [waiting], onDependencyFailure: 'continue' },
      { task: 'plain' },
    ]);
    expect(await db.tusk.getJob(a?.id as string)).toMatchObject({ state: 'scheduled', waitingOn: 1 });
    expect(await db.tusk.getJob(b?.id as string)).toMatchObject({ state: 'available', dependsOn: [] });
    // the library's own enqueue and the SQL one wait the same way
    const lib = await db.tusk.enqueue('use', null, { queue: 'sql-deps', dependsOn: [first] });
    const row = (id: string) =>
      db.rows('SELECT state::text, waiting_on, depends_on, on_dependency_failure FROM $schema.jobs WHERE id = $1', [
        id,
      ]);
    expect(await row(waiting)).toEqual(await row(lib.id));

    const before = await count();
    for (const [options, message] of [
      [
        { dependsOn: [first, 9000000000000000000n.toString()] },
        /^tusk: options\.dependsOn\[1\] is not a job: no job has id 9000000000000000000/,
      ],
      [{ dependsOn: [first, 1.5] }, /^tusk: options\.dependsOn\[1\] must be a job id: a positive integer \(got 1\.5\)/],
      [{ dependsOn: ['0'] }, /^tusk: options\.dependsOn\[0\] must be a job id/],
      [{ dependsOn: first }, /^tusk: options\.dependsOn must be an array of job ids/],
      [{ dependOn: [first] }, /unknown option "dependOn" \(did you mean "dependsOn"\?\)/],
      [{ onDependencyFailure: 'continue' }, /^tusk: options\.onDependencyFailure is for a job with dependencies/],
      [{ dependsOn: [first], onDependencyFailure: 'skip' }, /must be 'cancel' or 'continue'/],
      [{ dependsOn: [first], dedupKey: 'k' }, /^tusk: options has dependsOn and dedupKey/],
    ] as const) {
      const refused = await refusal(enqueueJob('use', null, options));
      expect(refused.code, JSON.stringify(options)).toBe('22023');
      expect(refused.message).toMatch(message);
    }
    const inBatch = await refusal(enqueueJobs([{ task: 'ok' }, { task: 'use', dependsOn: ['9000000000000000000'] }]));
    expect(inBatch).toMatchObject({
      code: '22023',
      message: expect.stringMatching(/^tusk: jobs\[1\]\.dependsOn\[0\] is not a job/),
    });
    const mixed = await refusal(
      enqueueJobs([
        { task: 'use', dependsOn: [first] },
        { task: 'd', dedupKey: 'k' },
      ]),
    );
    expect(mixed.message).toMatch(/enqueue them in separate calls/);
    expect(await count()).toBe(before);
    for (const id of [first, waiting, a?.id as string, b?.id as string, lib.id]) await db.tusk.cancel(id);
  });
});

describe('from a trigger', () => {
  const setUp = async (table: string, options: string) => {
    await db.pool.query(`
      CREATE TABLE ${s}.${table} (id serial PRIMARY KEY, email text NOT NULL);
      CREATE FUNCTION ${s}.${table}_welcome() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM ${s}.enqueue_job('welcome_${table}', jsonb_build_object('user_id', NEW.id), '${options}');
        RETURN NULL;
      END $$;
      CREATE TRIGGER welcome AFTER INSERT ON ${s}.${table}
        FOR EACH ROW EXECUTE FUNCTION ${s}.${table}_welcome();`);
  };
  /** The users the jobs of `table`'s trigger welcome. */
  const welcomes = async (table: string) =>
    (
      await db.rows<{ user_id: number }>(
        `SELECT (payload->>'user_id')::int AS user_id FROM $schema.jobs WHERE task = $1 ORDER BY id`,
        [`welcome_${table}`],
      )
    ).map((r) => r.user_id);

  it('enqueues inside the inserting transaction: committed, the job is there (and workers are told); rolled back, nothing', async () => {
    await setUp('users', '{"queue": "mail"}');
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const notes: string[] = [];
    listener.on('notification', (n) => notes.push(n.channel));
    await listener.query(`LISTEN "${db.schema}:jobs"`);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ id: number }>(`INSERT INTO ${s}.users (email) VALUES ('a@x') RETURNING id`);
      await client.query('ROLLBACK');
      expect(await welcomes('users')).toEqual([]);

      await client.query('BEGIN');
      const { rows: kept } = await client.query<{ id: number }>(
        `INSERT INTO ${s}.users (email) VALUES ('b@x'), ('c@x') RETURNING id`,
      );
      // not visible to others before the commit
      expect(await welcomes('users')).toEqual([]);
      await client.query('COMMIT');
      expect(await welcomes('users')).toEqual(kept.map((r) => r.id));
      expect(kept[0]?.id).not.toBe(rows[0]?.id);
      const queues = await db.rows<{ queue: string }>(`SELECT queue FROM $schema.jobs WHERE task = 'welcome_users'`);
      expect(queues).toEqual([{ queue: 'mail' }, { queue: 'mail' }]);
      await eventually(() => notes.includes(`${db.schema}:jobs`));
    } finally {
      client.release();
      await listener.end();
    }
  });

  it('a bad option in the trigger refuses the insert itself', async () => {
    await setUp('members', '{"queue": "mail", "maxAttempts": 0}');
    const error = await refusal(db.pool.query(`INSERT INTO ${s}.members (email) VALUES ('a@x')`));
    expect(error.code).toBe('22023');
    expect(error.message).toBe('tusk: options.maxAttempts must be an integer from 1 to 1000 (got 0)');
    expect(await db.rows(`SELECT * FROM ${s}.members`)).toEqual([]);
    expect(await welcomes('members')).toEqual([]);
  });

  it('a job enqueued by a trigger is run by a worker, woken by the insert', async () => {
    await setUp('accounts', '{"queue": "welcome"}');
    const seen: number[] = [];
    // polls only every 10 minutes: the insert's NOTIFY is what wakes it
    const worker = db.worker({
      queues: ['welcome'],
      pollMs: 600_000,
      tasks: { welcome_accounts: (p: { user_id: number }) => void seen.push(p.user_id) },
    });
    await worker.start();
    const { rows } = await db.pool.query<{ id: number }>(
      `INSERT INTO ${s}.accounts (email) VALUES ('a@x') RETURNING id`,
    );
    const done = await eventually(
      async () =>
        (
          await db.rows<{ state: string; attempts: number; payload: unknown }>(
            `SELECT state::text, attempts, payload FROM $schema.job_history WHERE queue = 'welcome'`,
          )
        )[0],
    );
    await worker.stop();
    expect(seen).toEqual([rows[0]?.id]);
    expect(done).toEqual({ state: 'succeeded', attempts: 1, payload: { user_id: rows[0]?.id } });
  });
});
