import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTask, type Queryable, TuskValidationError } from '../src/index.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const count = async () => Number((await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.jobs'))[0]?.n);

describe('enqueue', () => {
  it('returns an id and the job reads back with every field', async () => {
    const before = Date.now();
    const { id } = await db.tusk.enqueue(
      'send_email',
      { to: 'a@b.c', n: [1, 2] },
      { tenant: 'acme', queue: 'mail', priority: -3, maxAttempts: 7 },
    );
    expect(id).toMatch(/^\d+$/);
    const job = await db.tusk.getJob(id);
    expect(job).toMatchObject({
      id,
      task: 'send_email',
      tenant: 'acme',
      queue: 'mail',
      state: 'available',
      payload: { to: 'a@b.c', n: [1, 2] },
      priority: -3,
      attempts: 0,
      maxAttempts: 7,
      startedAt: null,
      finishedAt: null,
      waitMs: null,
      runMs: null,
      result: null,
      error: null,
      errors: [],
    });
    expect(job?.createdAt.getTime()).toBeGreaterThanOrEqual(before - 1000);
  });

  it('defaults: tenant and queue "default", no payload is null', async () => {
    const { id } = await db.tusk.enqueue('ping');
    expect(await db.tusk.getJob(id)).toMatchObject({
      tenant: 'default',
      queue: 'default',
      payload: null,
      priority: 0,
      maxAttempts: 5,
    });
  });

  it('a delayed job is scheduled with runAt in the future', async () => {
    const { id } = await db.tusk.enqueue('later', {}, { delayMs: 60_000 });
    const job = await db.tusk.getJob(id);
    expect(job?.state).toBe('scheduled');
    expect((job?.runAt.getTime() ?? 0) - Date.now()).toBeGreaterThan(55_000);
    const at = new Date(Date.now() + 3_600_000);
    const { id: id2 } = await db.tusk.enqueue('later', {}, { runAt: at });
    expect((await db.tusk.getJob(id2))?.runAt.getTime()).toBe(at.getTime());
  });

  it('getJob of an unknown id is null; of a malformed id, an error', async () => {
    expect(await db.tusk.getJob('999999999')).toBeNull();
    await expect(db.tusk.getJob('abc')).rejects.toThrow(/id: must be a job id/);
  });

  it('enqueueMany returns ids in input order, in one statement', async () => {
    const statements: string[] = [];
    const client = await db.pool.connect();
    const counting: Queryable = {
      query: (text: string, values?: unknown[]) => {
        statements.push(text);
        return client.query(text, values) as never;
      },
    };
    try {
      const jobs = Array.from({ length: 500 }, (_, i) => ({
        task: `t${i % 7}`,
        payload: { i },
        tenant: `tenant-${i % 5}`,
        ...(i % 10 === 0 ? { delayMs: 1000 } : {}),
      }));
      const { ids } = await db.tusk.enqueueMany(jobs, { client: counting });
      expect(statements).toHaveLength(1);
      expect(ids).toHaveLength(500);
      const rows = await db.rows<{ id: string; payload: { i: number }; tenant: string; state: string }>(
        'SELECT id, payload, tenant, state FROM $schema.jobs WHERE id = ANY($1::bigint[])',
        [ids],
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
      ids.forEach((id, i) => {
        expect(byId.get(id)?.payload.i).toBe(i);
        expect(byId.get(id)?.tenant).toBe(`tenant-${i % 5}`);
        expect(byId.get(id)?.state).toBe(i % 10 === 0 ? 'scheduled' : 'available');
      });
    } finally {
      client.release();
    }
    expect(await db.tusk.enqueueMany([])).toEqual({ ids: [] });
  });

  it('big batches go through COPY: ids in input order, every field exact, one NOTIFY', async () => {
    const odd = 'tab\there\nnewline \\ backslash \\N "quotes" ünïcödé 👋';
    const jobs = Array.from({ length: 1500 }, (_, i) => ({
      task: i % 2 ? `t "${i % 3}" ü` : 'copy',
      payload: { i, s: odd, nested: [{ x: odd }] },
      tenant: `ten\\ant-${i % 4}`,
      queue: i % 5 ? 'copy-q' : 'copy\\Nq',
      priority: (i % 7) - 3,
      maxAttempts: (i % 3) + 1,
      // names have no control characters; keys may (COPY must escape them)
      concurrencyKey: i % 2 ? `user:\t${i % 9}\n` : undefined,
      expiresAt: i % 10 ? undefined : new Date(Date.UTC(2030, 0, 1)),
      retry: i % 11 ? undefined : { backoff: 250, queue: 'again' },
    }));
    const { ids } = await db.tusk.enqueueMany(jobs);
    expect(ids).toHaveLength(1500);
    const rows = await db.rows<{
      id: string;
      task: string;
      payload: { i: number };
      tenant: string;
      queue: string;
      priority: number;
      max_attempts: number;
      concurrency_key: string;
      expires_at: Date | null;
      retry: unknown;
      state: string;
    }>('SELECT * FROM $schema.jobs WHERE id = ANY($1::bigint[])', [ids]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    ids.forEach((id, i) => {
      const row = byId.get(id);
      const job = jobs[i] as (typeof jobs)[number];
      expect(row).toMatchObject({
        task: job.task,
        payload: job.payload,
        tenant: job.tenant,
        queue: job.queue,
        priority: job.priority,
        max_attempts: job.maxAttempts,
        concurrency_key: job.concurrencyKey ?? '',
        expires_at: job.expiresAt ?? null,
        retry: job.retry ? { backoff: 250, queue: 'again' } : null,
        state: 'available',
      });
    });
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE id = ANY($1::bigint[])`, [ids]);
  });

  it('a big batch is checked as it is written: a bad entry in a later slice inserts nothing, is named, and the next batch goes through', async () => {
    const inQueue = async (queue: string) =>
      Number((await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.jobs WHERE queue = $1', [queue]))[0]?.n);
    const jobs: unknown[] = Array.from({ length: 2500 }, (_, i) => ({ task: 'bulk', payload: i, queue: 'copy-bad' }));
    jobs[1700] = { task: 'bulk', payload: 1700, queue: 'copy-bad', priority: 'high' };
    const error = await db.tusk.enqueueMany(jobs as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TuskValidationError);
    expect((error as Error).message).toMatch(/^jobs\[1700\]\.priority: /);
    expect(await inQueue('copy-bad')).toBe(0);
    // a hole, past the first slices: the same
    const holes = Array.from({ length: 2500 }, (_, i) => ({ task: 'bulk', payload: i, queue: 'copy-bad' }));
    delete (holes as unknown[])[2300];
    await expect(db.tusk.enqueueMany(holes)).rejects.toThrow(/^jobs\[2300\]: /);
    expect(await inQueue('copy-bad')).toBe(0);
    // a payload schema that refuses one entry of the last slice (such batches are checked
    // whole before they are written: the general path)
    const even = db.another({
      tasks: [defineTask('even', { schema: z.number().refine((n) => n % 2 === 0, 'must be even'), handler: () => {} })],
    });
    try {
      const payloads = Array.from({ length: 2500 }, (_, i) => ({
        task: 'even',
        payload: i === 2401 ? i : 2 * i,
        queue: 'copy-bad',
      }));
      await expect(even.enqueueMany(payloads)).rejects.toThrow(/^jobs\[2401\]\.payload: .*must be even/);
      expect(await inQueue('copy-bad')).toBe(0);
      // the connections are sound after the COPYs that failed
      const { ids } = await even.enqueueMany(payloads.map((p, i) => ({ ...p, payload: 2 * i })));
      expect(ids).toHaveLength(2500);
      expect(await inQueue('copy-bad')).toBe(2500);
    } finally {
      await even.close();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'copy-bad'`);
  });

  it('a big batch whose payload schema reads through the same Tusk does not wait for a connection it holds', async () => {
    // the schema's check needs a connection: with both held by two COPYs begun before their
    // checks, each waited for good
    const name = `copy-looks-${process.pid}`;
    const one = db.another({
      connectionString: `${db.url}${db.url.includes('?') ? '&' : '?'}application_name=${name}`,
      maxConnections: 2,
      tasks: [
        defineTask('looks', {
          schema: z.number().superRefine(async (n) => {
            if (n === 700) await one.getJob('1');
          }),
          handler: () => {},
        }),
      ],
    });
    try {
      const jobs = Array.from({ length: 1500 }, (_, i) => ({ task: 'looks', payload: i, queue: 'copy-looks' }));
      const written = await Promise.race([
        Promise.all([one.enqueueMany(jobs), one.enqueueMany(jobs)]),
        new Promise<null>((resolve) => setTimeout(() => resolve(null), 10_000)),
      ]);
      expect(written?.map((w) => w.ids.length)).toEqual([1500, 1500]);
    } finally {
      // a pool stuck that way never closes: its connections are cut, so that the test
      // fails rather than hangs
      await db.pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name]);
      await one.close();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'copy-looks'`);
  });

  it('a big batch reports its bad entry before a database error, and is read once', async () => {
    // no such schema: the general path names the bad entry, which it checks first
    const nowhere = db.another({ schema: `${db.schema}_missing` });
    try {
      const jobs: unknown[] = Array.from({ length: 2500 }, (_, i) => ({ task: 'bulk', payload: i }));
      jobs[1500] = { task: 'bulk', payload: 1500, priority: 'high' };
      await expect(nowhere.enqueueMany(jobs as never)).rejects.toThrow(/^jobs\[1500\]\.priority: /);
    } finally {
      await nowhere.close();
    }
    // an entry whose task, read a second time, adds to the array: what is written is the
    // array as it was when the call began
    const jobs: Array<{ task: string; payload: number; queue: string }> = Array.from({ length: 2500 }, (_, i) => ({
      task: 'bulk',
      payload: i,
      queue: 'copy-read-once',
    }));
    let reads = 0;
    Object.defineProperty(jobs[1200], 'task', {
      get() {
        if (++reads === 2) jobs.push({ task: 'bulk', payload: 2500, queue: 'copy-read-once' });
        return 'bulk';
      },
    });
    const { ids } = await db.tusk.enqueueMany(jobs);
    expect(ids).toHaveLength(2500);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'copy-read-once'`);
  });

  it('a big batch with a delay, a dedup key or dependencies on any entry takes the general path, which honours them', async () => {
    const plain = (i: number) => ({ task: 'bulk', payload: i, queue: 'copy-mixed' });
    const { id: first } = await db.tusk.enqueue('bulk', null, { queue: 'copy-mixed-dep' });
    const cases: Array<
      [string, Record<string, unknown>, (id: string, written: { deduplicated?: boolean[] }) => Promise<void>]
    > = [
      ['delayMs', { delayMs: 60_000 }, async (id) => expect((await db.tusk.getJob(id))?.state).toBe('scheduled')],
      [
        'runAt',
        { runAt: new Date(Date.now() + 60_000) },
        async (id) => expect((await db.tusk.getJob(id))?.state).toBe('scheduled'),
      ],
      ['dedupKey', { dedupKey: 'copy-mixed-k' }, async (_, w) => expect(w.deduplicated?.at(-1)).toBe(false)],
      ['dedupe', { dedupe: true }, async (_, w) => expect(w.deduplicated).toHaveLength(600)],
      [
        'debounce',
        { debounce: { key: 'copy-mixed-d', delayMs: 60_000 } },
        async (id) => expect((await db.tusk.getJob(id))?.state).toBe('scheduled'),
      ],
      ['dependsOn', { dependsOn: [first] }, async (id) => expect((await db.tusk.getJob(id))?.waitingOn).toBe(1)],
    ];
    for (const [name, options, check] of cases) {
      const jobs = Array.from({ length: 600 }, (_, i) => (i === 599 ? { ...plain(i), ...options } : plain(i)));
      const written = await db.tusk.enqueueMany(jobs);
      expect(written.ids, name).toHaveLength(600);
      await check(written.ids[599] as string, written);
      await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'copy-mixed'`);
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'copy-mixed-dep'`);
  });

  it('COPY inside the caller’s transaction commits and rolls back with it', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { ids } = await db.tusk.enqueueMany(
        Array.from({ length: 600 }, (_, i) => ({ task: 'tx-copy', payload: i })),
        {
          client,
        },
      );
      expect(await db.tusk.getJob(ids[0] as string)).toBeNull();
      await client.query('ROLLBACK');
      expect(await db.tusk.getJob(ids[0] as string)).toBeNull();
      await client.query('BEGIN');
      const { ids: kept } = await db.tusk.enqueueMany(
        Array.from({ length: 600 }, (_, i) => ({ task: 'tx-copy', payload: i })),
        {
          client,
        },
      );
      await client.query('COMMIT');
      expect((await db.tusk.getJob(kept[599] as string))?.payload).toBe(599);
      await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE task = 'tx-copy'`);
    } finally {
      client.release();
    }
  });

  it('payloads round-trip exactly (unicode, nesting, large numbers, empty values)', async () => {
    const payloads = [
      { s: 'héllo 👋 \\u0000 "quoted" \n' },
      [1, [2, [3, { deep: true }]]],
      { big: Number.MAX_SAFE_INTEGER, neg: -0.5, e: 1e-300 },
      '',
      0,
      false,
      {},
      [],
    ];
    const { ids } = await db.tusk.enqueueMany(payloads.map((payload) => ({ task: 'echo', payload })));
    for (const [i, id] of ids.entries()) expect((await db.tusk.getJob(id))?.payload).toEqual(payloads[i]);
  });
});

describe('bad input: a clear error naming the field, nothing written', () => {
  const circular: Record<string, unknown> = {};
  circular.self = circular;
  const cases: Array<[string, () => Promise<unknown>, RegExp]> = [
    ['empty task', () => db.tusk.enqueue(''), /^task: must not be empty/],
    ['task not a string', () => db.tusk.enqueue(42 as never), /^task: must be a string \(got 42\)/],
    ['task too long', () => db.tusk.enqueue('x'.repeat(201)), /^task: must be at most 200/],
    ['circular payload', () => db.tusk.enqueue('t', circular), /^payload\.self: must not be a circular reference/],
    ['NaN in payload', () => db.tusk.enqueue('t', { a: Number.NaN }), /^payload\.a: must not be NaN/],
    ['Infinity', () => db.tusk.enqueue('t', [Number.POSITIVE_INFINITY]), /^payload\[0\]: must not be Infinity/],
    ['BigInt', () => db.tusk.enqueue('t', { n: 10n }), /^payload\.n: must not be a BigInt/],
    ['function', () => db.tusk.enqueue('t', { f: () => 1 }), /^payload\.f: must not be a function/],
    ['NUL char', () => db.tusk.enqueue('t', { s: 'a\u0000b' }), /must not contain NUL/],
    ['lone surrogate', () => db.tusk.enqueue('t', { s: '\ud800' }), /lone surrogates/],
    ['negative delay', () => db.tusk.enqueue('t', {}, { delayMs: -1 }), /^options\.delayMs: must be an integer from 0/],
    ['fractional delay', () => db.tusk.enqueue('t', {}, { delayMs: 1.5 }), /^options\.delayMs/],
    [
      'delay as string',
      () => db.tusk.enqueue('t', {}, { delayMs: '10' as never }),
      /^options\.delayMs: must be a number \(got "10"\)/,
    ],
    [
      'invalid date',
      () => db.tusk.enqueue('t', {}, { runAt: new Date('nope') }),
      /^options\.runAt: must be a valid Date \(got Invalid Date\)/,
    ],
    [
      'runAt and delayMs',
      () => db.tusk.enqueue('t', {}, { runAt: new Date(), delayMs: 5 }),
      /runAt or delayMs, not both/,
    ],
    ['unknown option', () => db.tusk.enqueue('t', {}, { delay: 5 } as never), /^options: unknown option "delay"/],
    ['empty tenant', () => db.tusk.enqueue('t', {}, { tenant: '' }), /^options\.tenant: must not be empty/],
    [
      'priority out of range',
      () => db.tusk.enqueue('t', {}, { priority: 40000 }),
      /^options\.priority: must be an integer from -32768/,
    ],
    ['maxAttempts 0', () => db.tusk.enqueue('t', {}, { maxAttempts: 0 }), /^options\.maxAttempts/],
    [
      'client without query',
      () => db.tusk.enqueue('t', {}, { client: {} as never }),
      /^options\.client: must be a pg Client or PoolClient \(inside BEGIN\), a pg Pool, a Kysely transaction/,
    ],
    ['options not an object', () => db.tusk.enqueue('t', {}, 5 as never), /^options: must be an object/],
    [
      'a bad entry in a batch',
      () => db.tusk.enqueueMany([{ task: 'ok' }, { task: 'ok', delayMs: -5 }]),
      /^jobs\[1\]\.delayMs/,
    ],
    ['jobs not an array', () => db.tusk.enqueueMany({} as never), /^jobs: must be an array \(got an object\)/],
  ];
  it.each(cases)('%s', async (_name, call, message) => {
    const before = await count();
    const error = await call().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(message);
    expect(error).toBeInstanceOf(TuskValidationError);
    expect(await count()).toBe(before);
  });

  it('a payload over the size limit is refused', async () => {
    const small = db.another({ maxPayloadBytes: 2048 });
    await expect(small.enqueue('t', { s: 'x'.repeat(3000) })).rejects.toThrow(/over the limit of 2048/);
  });
});

describe('transactional enqueue', () => {
  it('commits with the caller', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { id } = await db.tusk.enqueue('in_tx', { n: 1 }, { client });
      // invisible outside the transaction until commit
      expect(await db.tusk.getJob(id)).toBeNull();
      await client.query('COMMIT');
      expect((await db.tusk.getJob(id))?.state).toBe('available');
    } finally {
      client.release();
    }
  });

  it('rolls back with the caller', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { id } = await db.tusk.enqueue('in_tx', {}, { client });
      const { ids } = await db.tusk.enqueueMany([{ task: 'a' }, { task: 'b' }], { client });
      await client.query('ROLLBACK');
      expect(await db.tusk.getJob(id)).toBeNull();
      for (const other of ids) expect(await db.tusk.getJob(other)).toBeNull();
    } finally {
      client.release();
    }
  });
});

describe('cancel', () => {
  it('cancels a waiting job at once; unknown ids give null; finished jobs keep their state', async () => {
    const { id } = await db.tusk.enqueue('to_cancel', {}, { delayMs: 60_000 });
    expect(await db.tusk.cancel(id)).toBe('cancelled');
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'cancelled', startedAt: null });
    expect(await db.tusk.cancel(id)).toBe('cancelled');
    expect(await db.tusk.cancel('987654321')).toBeNull();
  });
});
