// Bad input to the library: each call either throws a TuskValidationError naming the
// field and writes nothing, or is legal and stores exactly what it was given.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, defineTask, Tusk, TuskValidationError } from '../src/index.js';
import { expectRefused, isLegalName, jsonData, nameLike, OPTION_KINDS, wrongOption } from './badInput.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const tusk = db.tusk;
const MIB = 1024 * 1024;
const MAX_DELAY_MS = 100 * 365.25 * 24 * 3600 * 1000;

const circular: Record<string, unknown> = { a: 1 };
circular.self = circular;
const circularArray: unknown[] = [1];
circularArray.push({ back: circularArray });
const deep = (levels: number): unknown => {
  let value: unknown = 0;
  for (let i = 0; i < levels; i++) value = [value];
  return value;
};

/** Payloads JSON would change or jsonb cannot store: [name, payload, path under the field, message]. */
const BAD_PAYLOADS: Array<[string, unknown, string, RegExp]> = [
  ['circular object', circular, '.self', /must not be a circular reference/],
  ['circular array', circularArray, '[1].back', /must not be a circular reference/],
  ['NaN', { n: Number.NaN }, '.n', /must not be NaN \(JSON would store null\)/],
  ['Infinity', [Number.POSITIVE_INFINITY], '[0]', /must not be Infinity/],
  ['-Infinity', { deep: { x: Number.NEGATIVE_INFINITY } }, '.deep.x', /must not be -Infinity/],
  ['BigInt', { id: 10n }, '.id', /must not be a BigInt \(JSON has none\): send it as a string/],
  ['BigInt at the top', 10n, '', /must not be a BigInt/],
  ['function', { f: () => 1 }, '.f', /must not be a function/],
  ['function at the top', () => 1, '', /must not be a function/],
  ['function in an array', [1, () => 1], '[1]', /must not be a function/],
  ['symbol', { s: Symbol('s') }, '.s', /must not be a symbol/],
  ['symbol at the top', Symbol('s'), '', /must not be a symbol/],
  ['symbol key', { [Symbol('k')]: 1, a: 1 }, '', /must not have symbol keys/],
  ['undefined in an array', [1, undefined, 3], '[1]', /must not be undefined inside an array.*use null/],
  // biome-ignore lint/suspicious/noSparseArray: a hole is what is tested
  ['array hole', [1, , 3], '[1]', /must not be undefined inside an array/],
  ['invalid Date', { when: new Date('x') }, '.when', /must not be an invalid Date/],
  ['invalid Date at the top', new Date('nope'), '', /must not be an invalid Date/],
  ['Map', { m: new Map([['a', 1]]) }, '.m', /must not be a Map.*Object\.fromEntries/],
  ['Set', { s: new Set([1]) }, '.s', /must not be a Set/],
  ['Uint8Array', { bytes: new Uint8Array([1, 2]) }, '.bytes', /must not be a Uint8Array/],
  ['Error', { e: new Error('boom') }, '.e', /must not be an Error.*send its message/],
  ['RegExp', { r: /x/ }, '.r', /must not be a RegExp/],
  ['NUL in a string', { s: 'a\u0000b' }, '.s', /must not contain NUL characters/],
  ['NUL in a key', { k: { 'a\u0000': 1 } }, '.k', /must not have a key with NUL characters/],
  ['lone surrogate', ['ok', '\ud800'], '[1]', /must not contain lone surrogates/],
  ['lone surrogate in a key', { '\udc00': 1 }, '', /must not have a key with lone surrogates/],
  ['odd key in the path', { 'my key': [Number.NaN] }, '["my key"][0]', /must not be NaN/],
  ['nested 1 001 levels', deep(1001), '', /must not be nested deeper than 1000 levels/],
  ['nested 100 000 levels', deep(100_000), '', /must not be nested deeper than 1000 levels/],
  ['over 1 MiB', { s: 'x'.repeat(MIB) }, '', /is 1048584 bytes as JSON, over the limit of 1048576/],
  ['over 1 MiB in bytes, not characters', '€'.repeat(349_525), '', /is 1048577 bytes as JSON, over the limit/],
];

/** Legal payloads and what is stored: as given, but for JSON's documented conversions. */
class Point {
  constructor(
    readonly x: number,
    readonly y: number,
  ) {}
  norm() {
    return Math.hypot(this.x, this.y);
  }
}
const LEGAL_PAYLOADS: Array<[string, unknown, unknown]> = [
  ['nested unicode', { 名前: ['héllo', { '👋': 'שלום', e: 'e\u0301' }] }, undefined],
  ['control characters in strings', { s: 'tab\tnewline\n\u0001\u001f\u007f\u0085' }, undefined],
  ['escapes that look like NUL', { s: '\\u0000 and \\\\u0000' }, undefined],
  ['SQL-looking text', { q: "'); DROP TABLE jobs; --", p: '$1' }, undefined],
  ['extreme numbers', [Number.MAX_VALUE, Number.MIN_VALUE, -Number.MAX_SAFE_INTEGER, 0.1 + 0.2, 1e-300], undefined],
  ['empty values', { a: [], o: {}, s: '', n: null, f: false, z: 0 }, undefined],
  ['nested 1 000 levels', deep(1000), undefined],
  ['exactly 1 MiB', 'x'.repeat(MIB - 2), undefined],
  ['a Date becomes its ISO string', { at: new Date('2030-01-02T03:04:05.006Z') }, { at: '2030-01-02T03:04:05.006Z' }],
  ['undefined properties are left out', { a: 1, b: undefined }, { a: 1 }],
  ['-0 is 0', { z: -0 }, { z: 0 }],
  ['a class instance is its own fields', new Point(3, 4), { x: 3, y: 4 }],
  ['a Buffer is what its toJSON gives', Buffer.from('hi'), { type: 'Buffer', data: [104, 105] }],
  ['undefined is null', undefined, null],
];

/** A JSON value with -0 as 0: the one number jsonb does not keep apart. */
const zeroed = (value: unknown): unknown => JSON.parse(JSON.stringify(value));

async function roundTrip(payload: unknown): Promise<unknown> {
  const { id } = await tusk.enqueue('round_trip', payload);
  return (await tusk.getJob(id))?.payload;
}

// the fingerprints of every refusal hash the tables: keep them small
afterEach(() => db.pool.query(`DELETE FROM "${db.schema}".jobs`));

describe('payloads', () => {
  it.each(BAD_PAYLOADS)('refused: %s', async (_name, payload, path, message) => {
    await expectRefused(db, () => tusk.enqueue('t', payload), `payload${path}`, message);
    await expectRefused(
      db,
      () => tusk.enqueueMany([{ task: 'ok' }, { task: 't', payload }]),
      `jobs[1].payload${path}`,
      message,
    );
  });

  it('refused through stage, schedules and ack too, under their own field names', async () => {
    for (const [, payload, path, message] of BAD_PAYLOADS.slice(0, 12)) {
      await expectRefused(db, () => tusk.stage(db.pool, 't', payload), `payload${path}`, message);
      await expectRefused(db, () => tusk.stageMany(db.pool, [{ task: 't', payload }]), `jobs[0].payload${path}`);
      await expectRefused(db, () => tusk.schedule('s', '0 3 * * *', { payload }), `options.payload${path}`);
    }
    const { id } = await tusk.enqueue('ack_me', null, { queue: 'bad-ack' });
    const [lease] = await tusk.fetch({ queue: 'bad-ack' });
    expect(lease?.id).toBe(id);
    await expectRefused(db, () => tusk.ack(lease as never, { total: Number.NaN }), 'result.total', /NaN/);
    await tusk.ack(lease as never, { total: 1 });
  });

  it('the size limit is per instance (maxPayloadBytes) and counts UTF-8 bytes', async () => {
    const small = db.another({ maxPayloadBytes: 2048 });
    await expectRefused(db, () => small.enqueue('t', 'é'.repeat(1024)), 'payload', /is 2050 bytes.*limit of 2048/);
    expect(await small.enqueue('t', 'é'.repeat(1022)).then(({ id }) => small.getJob(id))).toMatchObject({
      payload: 'é'.repeat(1022),
    });
    expect(() => new Tusk({ maxPayloadBytes: 10 })).toThrow(
      /^Tusk options\.maxPayloadBytes: must be an integer from 1024 to 268435456 \(got 10\)/,
    );
  });

  it.each(LEGAL_PAYLOADS)('stored exactly: %s', async (_name, payload, stored) => {
    expect(await roundTrip(payload)).toEqual(stored === undefined ? payload : stored);
  });

  it('property: any JSON value of storable strings round-trips exactly (but -0, which is 0)', async () => {
    await fc.assert(
      fc.asyncProperty(jsonData, async (value) => {
        expect(await roundTrip(value)).toEqual(zeroed(value));
      }),
      { numRuns: 100 },
    );
  });

  it('property: a bad value anywhere in a payload is refused with its path, nothing written', async () => {
    const poisons: Array<[unknown, RegExp]> = [
      [Number.NaN, /must not be NaN/],
      [Number.NEGATIVE_INFINITY, /must not be -Infinity/],
      [7n, /must not be a BigInt/],
      [() => 1, /must not be a function/],
      [Symbol('p'), /must not be a symbol/],
      [new Map([[1, 2]]), /must not be a Map/],
      [new Date('x'), /must not be an invalid Date/],
      ['a\u0000b', /must not contain NUL characters/],
      ['x\udc00', /must not contain lone surrogates/],
      [undefined, /must not be undefined inside an array/],
    ];
    const segment = fc.oneof(fc.constantFrom('a', 'items', 'x_1', '$y'), fc.nat({ max: 3 }));
    const build = (path: Array<string | number>, poison: unknown, filler: unknown): unknown => {
      const [head, ...rest] = path;
      if (head === undefined) return poison;
      if (typeof head === 'number') return [...Array.from({ length: head }, () => filler), build(rest, poison, filler)];
      return { [head]: build(rest, poison, filler), zz_sibling: filler };
    };
    await fc.assert(
      fc.asyncProperty(
        fc.array(segment, { minLength: 1, maxLength: 4 }),
        fc.nat({ max: poisons.length - 1 }),
        jsonData,
        async (path, which, filler) => {
          const [poison, message] = poisons[which] as [unknown, RegExp];
          // undefined is only wrong inside an array (a property holding it is left out)
          if (poison === undefined && typeof path.at(-1) !== 'number') path.push(0);
          const where = path.map((s) => (typeof s === 'number' ? `[${s}]` : `.${s}`)).join('');
          await expectRefused(db, () => tusk.enqueue('t', build(path, poison, filler)), `payload${where}`, message);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('names', () => {
  const BAD_NAMES: Array<[string, unknown, RegExp]> = [
    ['empty', '', /must not be empty/],
    ['newline', 'acme\n', /must not contain control characters .*got "acme\\n"/],
    ['tab', 'a\tb', /must not contain control characters/],
    ['bell', 'a\u0007', /must not contain control characters/],
    ['DEL', 'a\u007f', /must not contain control characters/],
    ['C1 next line', 'a\u0085', /must not contain control characters/],
    ['NUL', 'a\u0000', /must not contain NUL characters/],
    ['lone surrogate', 'a\ud800', /must be well-formed Unicode/],
    ['a number', 42, /must be a string \(got 42\)/],
    ['null', null, /must be a string \(got null\)/],
    ['an object', { name: 'x' }, /must be a string \(got an object\)/],
  ];
  it.each(BAD_NAMES)('refused as task, queue, tenant: %s', async (_name, name, message) => {
    await expectRefused(db, () => tusk.enqueue(name as string), 'task', message);
    await expectRefused(db, () => tusk.enqueue('t', null, { queue: name as string }), 'options.queue', message);
    await expectRefused(db, () => tusk.enqueue('t', null, { tenant: name as string }), 'options.tenant', message);
    await expectRefused(db, () => tusk.tenants.set(name as string, { slots: 1 }), 'tenant', message);
    await expectRefused(db, () => tusk.enqueueMany([{ task: name as string }]), 'jobs[0].task', message);
  });

  it('refused when over-long: 200 code points for tasks, 128 for queues and tenants', async () => {
    await expectRefused(db, () => tusk.enqueue('x'.repeat(201)), 'task', /must be at most 200 characters/);
    await expectRefused(db, () => tusk.enqueue('t', null, { queue: 'q'.repeat(129) }), 'options.queue');
    await expectRefused(db, () => tusk.enqueue('t', null, { tenant: '😀'.repeat(129) }), 'options.tenant');
    await expectRefused(db, () => tusk.tenants.set('t'.repeat(129), {}), 'tenant', /at most 128 characters/);
  });

  const LEGAL_NAMES = [
    'acme',
    'ACME Corp. (EU)',
    "x'; DROP TABLE jobs; --",
    'Robert"); DELETE FROM tenants; --',
    '$1',
    '%',
    '_',
    'back\\slash',
    '顧客-東京',
    'עברית',
    'e\u0301',
    '👨‍👩‍👧',
    ' spaced out ',
    '😀'.repeat(128), // 128 code points, 256 UTF-16 units: PostgreSQL counts code points too
  ];
  it.each(LEGAL_NAMES)('stored exactly as task, queue and tenant: %s', async (name) => {
    const { id } = await tusk.enqueue(name, { name }, { queue: name, tenant: name });
    expect(await tusk.getJob(id)).toMatchObject({ task: name, queue: name, tenant: name, payload: { name } });
    const info = await tusk.tenants.set(name, { slots: 2 });
    expect(info).toMatchObject({ tenant: name, ownSlots: 2 });
    expect((await tusk.tenants.get(name))?.tenant).toBe(name);
  });

  it('LIKE wildcards in names match only themselves', async () => {
    await tusk.tenants.set('%', { slots: 7 });
    await tusk.tenants.set('_', { slots: 8 });
    expect((await tusk.tenants.get('%'))?.ownSlots).toBe(7);
    expect((await tusk.tenants.get('_'))?.ownSlots).toBe(8);
  });

  it('property: any string as a tenant, queue or task is stored exactly if legal, else refused', async () => {
    const fields = [
      ['tenant', 128],
      ['queue', 128],
      ['task', 200],
    ] as const;
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: 2 }), nameLike(200), async (which, name) => {
        const [field, max] = fields[which] as (typeof fields)[number];
        const call = () => (field === 'task' ? tusk.enqueue(name) : tusk.enqueue('named', null, { [field]: name }));
        if (!isLegalName(name, max)) {
          await expectRefused(db, call, field === 'task' ? 'task' : `options.${field}`);
          return;
        }
        const { id } = await call();
        const job = await tusk.getJob(id);
        expect(job?.[field]).toBe(name);
      }),
      { numRuns: 100 },
    );
  });

  it('property: any string as a tenant of tenants.set is stored exactly if legal, else refused', async () => {
    await fc.assert(
      fc.asyncProperty(nameLike(128), async (name) => {
        if (!isLegalName(name, 128)) {
          await expectRefused(db, () => tusk.tenants.set(name, { perKey: 3 }), 'tenant');
          return;
        }
        expect(await tusk.tenants.set(name, { perKey: 3 })).toMatchObject({ tenant: name, perKey: 3 });
        expect((await tusk.tenants.get(name))?.tenant).toBe(name);
      }),
      { numRuns: 50 },
    );
  });

  it('keys (concurrencyKey, dedupKey) may hold control characters; never NUL', async () => {
    const key = 'user:\t42\n';
    const { id } = await tusk.enqueue('t', null, { concurrencyKey: key, dedupKey: key });
    expect((await tusk.getJob(id))?.concurrencyKey).toBe(key);
    await expectRefused(db, () => tusk.enqueue('t', null, { concurrencyKey: 'a\u0000' }), 'options.concurrencyKey');
    await expectRefused(db, () => tusk.enqueue('t', null, { dedupKey: '' }), 'options.dedupKey', /not be empty/);
  });
});

describe('enqueue options', () => {
  const now = new Date();
  const BAD_OPTIONS: Array<[string, unknown, string, RegExp]> = [
    ['negative delay', { delayMs: -1 }, 'delayMs', /must be an integer from 0 to 3155760000000 \(got -1\)/],
    ['fractional delay', { delayMs: 1.5 }, 'delayMs', /\(got 1\.5\)/],
    ['NaN delay', { delayMs: Number.NaN }, 'delayMs', /\(got NaN\)/],
    ['Infinity delay', { delayMs: Number.POSITIVE_INFINITY }, 'delayMs', /\(got Infinity\)/],
    ['huge delay', { delayMs: 1e300 }, 'delayMs', /\(got 1e\+300\)/],
    ['delay over 100 years', { delayMs: MAX_DELAY_MS + 1 }, 'delayMs', /from 0 to 3155760000000/],
    ['delay as a string', { delayMs: '10' }, 'delayMs', /must be a number \(got "10"\)/],
    ['delay null', { delayMs: null }, 'delayMs', /must be a number \(got null\)/],
    ['maxAttempts 0', { maxAttempts: 0 }, 'maxAttempts', /from 1 to 1000 \(got 0\)/],
    ['maxAttempts negative', { maxAttempts: -3 }, 'maxAttempts', /\(got -3\)/],
    ['maxAttempts fractional', { maxAttempts: 2.5 }, 'maxAttempts', /\(got 2\.5\)/],
    ['maxAttempts huge', { maxAttempts: 1e9 }, 'maxAttempts', /from 1 to 1000/],
    ['maxAttempts as a string', { maxAttempts: '3' }, 'maxAttempts', /must be a number/],
    ['priority out of range', { priority: 40000 }, 'priority', /from -32768 to 32767/],
    ['priority fractional', { priority: 0.5 }, 'priority', /\(got 0\.5\)/],
    ['invalid runAt', { runAt: new Date('x') }, 'runAt', /must be a valid Date \(got Invalid Date\)/],
    ['runAt as a string', { runAt: '2030-01-01' }, 'runAt', /must be a valid Date \(got "2030-01-01"\)/],
    ['runAt as a number', { runAt: Date.now() }, 'runAt', /must be a valid Date/],
    ['runAt in year 10000', { runAt: new Date('+010000-01-01T00:00:00Z') }, 'runAt', /must be a valid Date/],
    ['invalid expiresAt', { expiresAt: new Date(Number.NaN) }, 'expiresAt', /Invalid Date/],
    ['runAt and delayMs', { runAt: now, delayMs: 5 }, '', /give runAt or delayMs, not both/],
    ['dedupWindowMs negative', { dedupWindowMs: -1 }, 'dedupWindowMs', /from 0/],
    ['dedupe as a string', { dedupe: 'yes' }, 'dedupe', /must be true or false \(got "yes"\)/],
    ['retry not an object', { retry: 5 }, 'retry', /must be an object \(got 5\)/],
    ['retry backoff by name', { retry: { backoff: 'linear' } }, 'retry.backoff', /'exponential' or a number/],
    ['retry backoff function', { retry: { backoff: () => 1 } }, 'retry.backoff', /belongs in the task definition/],
    ['retry backoff negative', { retry: { backoff: -5 } }, 'retry.backoff', /from 0 to 3155760000000 \(got -5\)/],
    ['retry maxAttempts 0', { retry: { maxAttempts: 0 } }, 'retry.maxAttempts', /from 1 to 1000/],
    [
      'retry typo',
      { retry: { maxAttempt: 3 } },
      'retry',
      /unknown option "maxAttempt" \(did you mean "maxAttempts"\?\)/,
    ],
    ['source without id', { source: { type: 'Report' } }, 'source.id', /must be a string of 1 to 256/],
    ['source id fractional', { source: { type: 'Report', id: 1.5 } }, 'source.id', /\(got 1\.5\)/],
    ['source type with a newline', { source: { type: 'A\nB', id: 1 } }, 'source.type', /control characters/],
    ['client without query', { client: {} }, 'client', /must be a pg Client/],
    ['typo: delay', { delay: 5000 }, '', /: unknown option "delay" \(did you mean "delayMs"\?\)$/],
    ['typo: maxAttempt', { maxAttempt: 3 }, '', /unknown option "maxAttempt" \(did you mean "maxAttempts"\?\)/],
    ['typo: Queue', { Queue: 'q' }, '', /unknown option "Queue" \(did you mean "queue"\?\)/],
    ['typo: priorty', { priorty: 1 }, '', /unknown option "priorty" \(did you mean "priority"\?\)/],
    ['typo: tenantId', { tenantId: 'acme' }, '', /unknown option "tenantId" \(did you mean "tenant"\?\)/],
    ['unknown option', { colour: 'red' }, '', /: unknown option "colour"$/],
    ['two unknown options', { a1: 1, b2: 2 }, '', /unknown options "a1", "b2"/],
    ['options null', null, '', /must be an object \(got null\)/],
    ['options a string', 'fast', '', /must be an object \(got "fast"\)/],
    ['options an array', [], '', /must be an object \(got an array\)/],
    ['options a Date', new Date(), '', /must be a plain object \(got a Date\)/],
    ['retry a Map', { retry: new Map() }, 'retry', /must be a plain object \(got a Map\)/],
  ];
  it.each(BAD_OPTIONS)('refused: %s', async (_name, options, path, message) => {
    const field = path ? `options.${path}` : 'options';
    await expectRefused(db, () => tusk.enqueue('t', {}, options as never), field, message);
    if (Object.getPrototypeOf(options ?? 0) === Object.prototype && !('client' in (options as object))) {
      await expectRefused(
        db,
        () => tusk.enqueueMany([{ task: 't', ...(options as object) }]),
        path ? `jobs[0].${path}` : 'jobs[0]',
        message,
      );
    }
  });

  it('the longest delay (100 years) and the extreme priorities are legal and stored', async () => {
    const before = Date.now();
    const { id } = await tusk.enqueue('far', null, { delayMs: MAX_DELAY_MS, priority: -32768, maxAttempts: 1000 });
    const job = await tusk.getJob(id);
    expect(job).toMatchObject({ state: 'scheduled', priority: -32768, maxAttempts: 1000 });
    expect((job?.runAt.getTime() as number) - before).toBeGreaterThanOrEqual(MAX_DELAY_MS - 1000);
    const runAt = new Date('9999-12-31T23:59:59.999Z');
    const late = await tusk.enqueue('far', null, { runAt, priority: 32767 });
    expect((await tusk.getJob(late.id))?.runAt).toEqual(runAt);
  });

  it('property: an option of the wrong type is refused, naming it', async () => {
    const badOption = wrongOption(OPTION_KINDS);
    await fc.assert(
      fc.asyncProperty(badOption, async ([key, value]) => {
        const error = await expectRefused(db, () => tusk.enqueue('t', {}, { [key]: value }), `options.${key}`);
        expect(error.issues[0]?.path).toBe(`options.${key}`);
      }),
      { numRuns: 100 },
    );
  });

  it('property: an unknown option is refused, naming it', async () => {
    const known = new Set([...Object.keys(OPTION_KINDS), 'client']);
    await fc.assert(
      fc.asyncProperty(
        fc.string({ minLength: 1, maxLength: 12 }).filter((k) => !known.has(k) && k !== '__proto__'),
        fc.jsonValue(),
        async (key, value) => {
          const error = await expectRefused(db, () => tusk.enqueue('t', {}, { [key]: value } as never), 'options');
          expect(error.message).toContain(`unknown option ${JSON.stringify(key)}`);
        },
      ),
      { numRuns: 50 },
    );
  });

  it('enqueueMany: a list with a bad entry writes none of it', async () => {
    // biome-ignore lint/suspicious/noSparseArray: a hole is what is tested
    const holey = [{ task: 'a' }, , { task: 'b' }];
    await expectRefused(db, () => tusk.enqueueMany(holey as never), 'jobs[1]', /must be an object \(got undefined\)/);
    await expectRefused(db, () => tusk.enqueueMany([null] as never), 'jobs[0]', /must be an object \(got null\)/);
    await expectRefused(db, () => tusk.enqueueMany({ 0: { task: 'a' } } as never), 'jobs', /must be an array/);
    await expectRefused(db, () => tusk.enqueueMany('jobs' as never), 'jobs', /must be an array \(got "jobs"\)/);
    const many = Array.from({ length: 600 }, (_, i) => ({ task: 'bulk', payload: { i } }));
    many[599] = { task: 'bulk', payload: { i: Number.NaN } };
    await expectRefused(db, () => tusk.enqueueMany(many), 'jobs[599].payload.i', /NaN/);
    await expectRefused(db, () => tusk.enqueueMany([], { clinet: db.pool } as never), 'options', /"client"/);
  });

  it('job ids: malformed ones are refused by getJob, cancel and retry', async () => {
    for (const id of ['abc', '', '-1', '1.5', '0', '99999999999999999999', 1.5, -1, Number.NaN]) {
      await expectRefused(db, () => tusk.getJob(id as never), 'id', /must be a job id/);
      await expectRefused(db, () => tusk.cancel(id as never), 'id', /must be a job id/);
      await expectRefused(db, () => tusk.retry(id as never), 'id', /must be a job id/);
    }
    // a number past 2^53 is not the id it was written as: 2 ** 60 + 1 is 2 ** 60, which
    // String() writes as 1152921504606847000, another id; refused, where a string or a bigint is not
    for (const id of [2 ** 60 + 1, Number.MAX_SAFE_INTEGER + 1]) {
      await expectRefused(db, () => tusk.getJob(id), 'id', /past 2\^53 is not exact: pass the id as a string/);
      await expectRefused(db, () => tusk.cancel(id), 'id', /past 2\^53/);
    }
    expect(await tusk.getJob('1152921504606846977')).toBeNull();
    expect(await tusk.getJob(2n ** 60n + 1n)).toBeNull();
    expect(await tusk.getJob(Number.MAX_SAFE_INTEGER)).toBeNull();
  });
});

describe('tenant settings', () => {
  const BAD_SETTINGS: Array<[string, unknown, string, RegExp]> = [
    ['slots 0', { slots: 0 }, 'slots', /must be an integer from 1 to 1000000 \(got 0\)/],
    ['slots negative', { slots: -1 }, 'slots', /\(got -1\)/],
    ['slots fractional', { slots: 1.5 }, 'slots', /\(got 1\.5\)/],
    ['slots NaN', { slots: Number.NaN }, 'slots', /\(got NaN\)/],
    ['slots huge', { slots: 1e7 }, 'slots', /from 1 to 1000000/],
    ['slots as a string', { slots: '5' }, 'slots', /must be a number \(got "5"\)/],
    ['perKey 0', { perKey: 0 }, 'perKey', /from 1 to 1000000/],
    ['rate a number', { rate: 100 }, 'rate', /must be \{ limit, perMs \} or null \(got 100\)/],
    ['rate limit 0', { rate: { limit: 0, perMs: 1000 } }, 'rate.limit', /from 1/],
    ['rate window 0', { rate: { limit: 5, perMs: 0 } }, 'rate.perMs', /from 1 to 2678400000/],
    ['rate typo', { rate: { limit: 5, per: 1000 } }, 'rate', /unknown option "per" \(did you mean "perMs"\?\)/],
    ['retention forever', { retention: 'forever' }, 'retention', /must be a period like '30 days'/],
    ['retention 0 days', { retention: '0 days' }, 'retention', /a positive number/],
    ['retention a number', { retention: 30 }, 'retention', /\(got 30\)/],
    ['paused as a string', { paused: 'yes' }, 'paused', /must be true or false \(got "yes"\)/],
    ['typo: slot', { slot: 5 }, '', /unknown option "slot" \(did you mean "slots"\?\)/],
    ['typo: perkey', { perkey: 5 }, '', /did you mean "perKey"/],
    ['settings null', null, '', /must be an object \(got null\)/],
  ];
  it.each(BAD_SETTINGS)('refused: %s', async (_name, settings, path, message) => {
    await tusk.tenants.set('settled', { slots: 4 });
    await expectRefused(
      db,
      () => tusk.tenants.set('settled', settings as never),
      path ? `settings.${path}` : 'settings',
      message,
    );
    expect((await tusk.tenants.get('settled'))?.ownSlots).toBe(4);
  });

  it('defaults: bad settings refused', async () => {
    await expectRefused(db, () => tusk.tenants.setDefault({ slots: 0 }), 'settings.slots', /from 1/);
    await expectRefused(db, () => tusk.tenants.setDefault({ retention: 'soon' }), 'settings.retention');
    await expectRefused(db, () => tusk.tenants.setDefault({ perKey: 2 } as never), 'settings', /unknown option/);
  });

  it('property: a setting of the wrong type is refused, naming it', async () => {
    const kinds = {
      slots: 'number',
      perKey: 'number',
      paused: 'boolean',
      retention: 'string',
      rate: 'object',
    } as const;
    // null resets: legal for every setting but paused
    const bad = wrongOption(kinds, (key, value) => value === null && key !== 'paused');
    await fc.assert(
      fc.asyncProperty(bad, async ([key, value]) => {
        await expectRefused(db, () => tusk.tenants.set('typed', { [key]: value }), `settings.${key}`);
      }),
      { numRuns: 60 },
    );
  });
});

describe('worker options and task definitions', () => {
  const BAD_WORKER_OPTIONS: Array<[string, unknown, string, RegExp]> = [
    ['concurrency 0', { concurrency: 0 }, 'concurrency', /from 1 to 10000 \(got 0\)/],
    ['concurrency NaN', { concurrency: Number.NaN }, 'concurrency', /\(got NaN\)/],
    ['concurrency as a string', { concurrency: '4' }, 'concurrency', /must be a number \(got "4"\)/],
    ['queues empty', { queues: [] }, 'queues', /must not be empty/],
    ['queues a string', { queues: 'default' }, 'queues', /must be a list of queue names/],
    ['queue empty name', { queues: [''] }, 'queues.0', /must not be empty/],
    ['queue weight 0', { queues: [['a', 0]] }, 'queues.0.1', /must be a weight above 0/],
    ['prefetch negative', { prefetch: -1 }, 'prefetch', /an integer from 0 to 10000 \(got -1\)/],
    ['prefetch a word', { prefetch: 'lots' }, 'prefetch', /\(got "lots"\)/],
    ['leaseMs 0', { leaseMs: 0 }, 'leaseMs', /from 1/],
    ['shutdownTimeoutMs fractional', { shutdownTimeoutMs: 0.5 }, 'shutdownTimeoutMs', /\(got 0\.5\)/],
    ['asyncCommit as a string', { asyncCommit: 'no' }, 'asyncCommit', /must be true or false/],
    ['name with a newline', { name: 'w\n1' }, 'name', /control characters/],
    ['typo: concurency', { concurency: 4 }, '', /unknown option "concurency" \(did you mean "concurrency"\?\)/],
    ['typo: queue', { queue: 'a' }, '', /unknown option "queue" \(did you mean "queues"\?\)/],
    ['tasks null', { tasks: null }, 'tasks', /must be an object of task name/],
    ['a handler that is a number', { tasks: { a: 5 } }, 'tasks.a', /a handler function or a task definition \(got 5\)/],
    ['handler not a function', { tasks: { a: { handler: 'run' } } }, 'tasks.a.handler', /must be a function/],
    ['timeoutMs negative', { tasks: { a: { timeoutMs: -1 } } }, 'tasks.a.timeoutMs', /from 1 to 2147483647/],
    ['timeoutMs fractional', { tasks: { a: { timeoutMs: 1.5 } } }, 'tasks.a.timeoutMs', /\(got 1\.5\)/],
    ['timeoutMs Infinity', { tasks: { a: { timeoutMs: Infinity } } }, 'tasks.a.timeoutMs', /\(got Infinity\)/],
    ['timeoutMs as a string', { tasks: { a: { timeoutMs: '5s' } } }, 'tasks.a.timeoutMs', /must be a number/],
    ['backoff negative', { tasks: { a: { retry: { backoff: -1 } } } }, 'tasks.a.retry.backoff', /\(got -1\)/],
    [
      'backoff huge',
      { tasks: { a: { retry: { backoff: 1e20 } } } },
      'tasks.a.retry.backoff',
      /from 0 to 3155760000000/,
    ],
    ['backoff by name', { tasks: { a: { retry: { backoff: 'linear' } } } }, 'tasks.a.retry.backoff', /or a function/],
    ['retry typo', { tasks: { a: { retry: { maxAttempt: 2 } } } }, 'tasks.a.retry', /did you mean "maxAttempts"/],
    [
      'definition typo',
      { tasks: { a: { timeout: 5 } } },
      'tasks.a',
      /unknown option "timeout" \(did you mean "timeoutMs"\?\)/,
    ],
    ['task name with a tab', { tasks: { 'a\tb': () => 1 } }, 'tasks.a\tb', /control characters/],
    ['list entry typo', { tasks: [{ name: 'a', queu: 'x' }] }, 'tasks.0', /did you mean "queue"/],
  ];
  it.each(BAD_WORKER_OPTIONS)('refused: %s', async (_name, options, path, message) => {
    const field = path ? `worker options.${path}` : 'worker options';
    const withTasks = { tasks: { t: () => 1 }, ...(options as object) };
    await expectRefused(db, () => tusk.worker(withTasks as never), field, message);
    expect(await db.rows('SELECT id FROM $schema.workers')).toEqual([]);
  });

  it('property: a worker option of the wrong type is refused, naming it', async () => {
    const kinds = {
      concurrency: 'number',
      prefetch: 'number',
      batchSize: 'number',
      leaseMs: 'number',
      heartbeatMs: 'number',
      pollMs: 'number',
      maintenanceMs: 'number',
      shutdownTimeoutMs: 'number',
      asyncCommit: 'boolean',
      name: 'string',
    } as const;
    const bad = wrongOption(kinds);
    await fc.assert(
      fc.asyncProperty(bad, async ([key, value]) => {
        await expectRefused(db, () => tusk.worker({ tasks: {}, [key]: value }), `worker options.${key}`);
      }),
      { numRuns: 60 },
    );
  });

  it('defineTask and new Tusk refuse bad names, definitions and options', async () => {
    await expectRefused(db, () => defineTask('', { handler: () => 1 }), 'name', /must not be empty/);
    await expectRefused(db, () => defineTask('a\nb', { handler: () => 1 }), 'name', /control characters/);
    await expectRefused(db, () => defineTask('a', { queue: '' }), 'definition.queue', /must not be empty/);
    await expectRefused(db, () => defineTask('a', { tenantt: 'x' } as never), 'definition', /did you mean "tenant"/);
    await expectRefused(db, () => defineTask('a', { timeoutMs: 0 }), 'definition.timeoutMs', /from 1/);
    const twice = [defineTask('same', {}), defineTask('same', {})];
    await expectRefused(db, () => new Tusk({ tasks: twice }), 'tasks[1].name', /name of an earlier task/);
    await expectRefused(db, () => new Tusk({ maxConnections: 1 }), 'Tusk options.maxConnections', /from 2/);
    await expectRefused(db, () => new Tusk({ maxPayloadByte: 5 } as never), 'Tusk options', /"maxPayloadBytes"/);
    await expectRefused(db, () => new Tusk({ logger: 'loud' } as never), 'Tusk options.logger');
  });

  it('leases and other calls: bad options refused, naming them', async () => {
    await expectRefused(db, () => tusk.fetch({ count: 0 }), 'options.count', /from 1 to 10000/);
    await expectRefused(db, () => tusk.fetch({ leaseMs: -5 }), 'options.leaseMs', /\(got -5\)/);
    await expectRefused(db, () => tusk.fetch({ lease: 5 } as never), 'options', /did you mean "leaseMs"/);
    await expectRefused(db, () => tusk.ack({ id: '1' } as never), 'lease.token', /must be a string \(got undefined\)/);
    await expectRefused(db, () => tusk.ack(5 as never), 'lease', /the token tells this lease/);
    await expectRefused(db, () => tusk.nack({ id: '1', token: '1' }, { error: 'a\u0000' }), 'options.error', /NUL/);
    await expectRefused(db, () => tusk.nack({ id: '1', token: '1' }, { delayMs: -1 }), 'options.delayMs');
    // before, a delay past 24.8 days, or a token past a bigint's range, failed in PostgreSQL
    const month = 30 * 24 * 3600_000;
    await expectRefused(
      db,
      () => tusk.nack({ id: '1', token: '1' }, { delayMs: month }),
      'options.delayMs',
      /to 2147483647/,
    );
    const tooBig = '9999999999999999999';
    await expectRefused(db, () => tusk.ack({ id: '1', token: tooBig }), 'lease.token', /up to 9223372036854775807/);
    await expectRefused(db, () => tusk.nack({ id: tooBig, token: '1' }), 'lease.id', /up to 9223372036854775807/);
    await expectRefused(db, () => tusk.extendLease({ id: '1', token: '1' }, 0), 'ms', /from 1/);
    await expectRefused(db, () => tusk.working({ id: '1', token: '1' }, -5), 'ms', /from 1/);
    await expectRefused(db, () => tusk.stats({ window: 5 } as never), 'options', /did you mean "windowMs"/);
    await expectRefused(db, () => tusk.stats({ windowMs: -1 }), 'options.windowMs', /from 0/);
    await expectRefused(db, () => tusk.retryAll({ state: 'succeeded' as never }), 'filter.state');
    await expectRefused(db, () => tusk.finishedJobs({ tenant: '', limit: 5 }), 'options.tenant');
    await expectRefused(db, () => tusk.prune({ batch: 0 }), 'options.batch', /from 1/);
    await expectRefused(db, () => tusk.schedule('nightly\n', '0 3 * * *'), 'name', /control characters/);
    const { tokens } = await createServer(tusk, { adminToken: 'unused', dashboard: false, metrics: false });
    await expectRefused(
      db,
      () => createServer(tusk, { maxBodyBytes: '1mb' } as never),
      'server options.maxBodyBytes',
      /got "1mb"/,
    );
    await expectRefused(
      db,
      () => createServer(tusk, { metrics: { lag: 5 } } as never),
      'server options.metrics',
      /"lagMs"/,
    );
    await expectRefused(db, () => createServer(tusk, { dashbord: false } as never), 'server options', /"dashboard"/);
    const server = await createServer(tusk, { adminToken: 'unused', dashboard: false, metrics: false });
    await expectRefused(db, () => server.listen({ port: 70000 }), 'listen options.port', /from 0 to 65535/);
    await expectRefused(db, () => tokens.create({ name: 'web\u0000app' }), 'options.name', /NUL/);
    await expectRefused(db, () => tokens.create({ tenant: 'acme\n' }), 'options.tenant', /control characters/);
  });

  it('the errors are TuskValidationErrors with one issue naming the field', async () => {
    const error = await tusk.enqueue('t', {}, { delayMs: -1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TuskValidationError);
    expect((error as TuskValidationError).issues).toEqual([
      { path: 'options.delayMs', message: 'must be an integer from 0 to 3155760000000 (got -1)' },
    ]);
  });
});
