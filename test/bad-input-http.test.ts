// Bad input to the HTTP API: each request either gets a 400 whose JSON body names the
// field and writes nothing, or is legal and reads back exactly (GET /api/jobs/:id).
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { errorSchema, jobSchema } from '../src/http/schemas.js';
import { createServer, type Listening } from '../src/index.js';
import { fingerprint, isLegalName, jsonData, nameLike, OPTION_KINDS } from './badInput.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const ADMIN = 'bad-input-admin-token-0123456789';
let listening: Listening;

beforeAll(async () => {
  const server = await createServer(db.tusk, { adminToken: ADMIN, dashboard: false, metrics: false });
  listening = await server.listen({ port: 0 });
});
afterAll(() => listening?.close());
afterEach(() => db.pool.query(`DELETE FROM "${db.schema}".jobs`));

interface Reply {
  status: number;
  body: unknown;
}

/** A request with the admin token; `body` is sent as JSON, `raw` as it is. */
async function send(
  method: string,
  path: string,
  options: { body?: unknown; raw?: string | Uint8Array; url?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
  const body = options.body === undefined ? options.raw : JSON.stringify(options.body);
  const response = await fetch(`${options.url ?? listening.url}${path}`, { method, headers, body });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** A 400 naming `field` (its message starting with it), and no table changed. */
async function refused(
  method: string,
  path: string,
  request: { body?: unknown; raw?: string | Uint8Array },
  field: string,
  message?: RegExp,
): Promise<void> {
  const before = await fingerprint(db);
  const reply = await send(method, path, request);
  expect(reply.status, JSON.stringify(reply.body)).toBe(400);
  const { error } = errorSchema.parse(reply.body);
  expect(error.field, error.message).toBe(field);
  expect(error.message.startsWith(`${field}: `), error.message).toBe(true);
  if (message) expect(error.message).toMatch(message);
  expect(await fingerprint(db)).toEqual(before);
}

/** POSTs a job and reads it back through the API. */
async function postAndGet(job: Record<string, unknown>) {
  const posted = await send('POST', '/api/jobs', { body: job });
  expect(posted.status, JSON.stringify(posted.body)).toBe(201);
  const { id } = posted.body as { id: string };
  const read = await send('GET', `/api/jobs/${id}`);
  expect(read.status).toBe(200);
  return jobSchema.parse(read.body);
}

const utf8 = (text: string) => new TextEncoder().encode(text);

describe('request bodies', () => {
  const NOT_JSON: Array<[string, string | Uint8Array, RegExp]> = [
    ['cut short', '{"task": ', /not valid JSON/],
    ['a form', 'task=x&payload=1', /not valid JSON/],
    ['single quotes', "{'task': 'x'}", /not valid JSON/],
    ['NaN', '{"task": "x", "payload": NaN}', /not valid JSON/],
    ['a trailing comma', '{"task": "x",}', /not valid JSON/],
    ['empty', '', /a JSON body is required/],
    ['blank', ' \n\t', /a JSON body is required/],
    ['bytes that are not UTF-8', new Uint8Array([0x7b, 0x22, 0x74, 0xff, 0x22, 0x7d]), /not valid UTF-8/],
    // a lone surrogate encoded as UTF-8 bytes (CESU-8): not UTF-8 either
    ['an encoded lone surrogate', new Uint8Array([...utf8('{"task": "'), 0xed, 0xa0, 0x80, ...utf8('"}')]), /UTF-8/],
  ];
  it.each(NOT_JSON)('refused: %s', async (_name, raw, message) => {
    await refused('POST', '/api/jobs', { raw }, 'body', message);
  });

  const NOT_OBJECTS: Array<[string, string, RegExp]> = [
    ['an array', '[]', /must be an object \(got an array\)/],
    ['a string', '"x"', /must be an object \(got "x"\)/],
    ['a number', '5', /must be an object \(got 5\)/],
    ['null', 'null', /must be an object \(got null\)/],
    ['true', 'true', /must be an object \(got true\)/],
  ];
  it.each(NOT_OBJECTS)('refused: the body is %s', async (_name, raw, message) => {
    await refused('POST', '/api/jobs', { raw }, 'body', message);
    await refused('POST', '/api/jobs/1/ack', { raw }, 'body', message);
    await refused('PATCH', '/api/tenants/acme', { raw }, 'body', message);
  });

  it('a UTF-8 byte order mark is not part of the JSON', async () => {
    const reply = await send('POST', '/api/jobs', {
      raw: new Uint8Array([0xef, 0xbb, 0xbf, ...utf8('{"task":"bom"}')]),
    });
    expect(reply.status).toBe(201);
  });

  it('a body over the server limit is a 413, with or without a content-length', async () => {
    const server = await createServer(db.tusk, {
      adminToken: ADMIN,
      dashboard: false,
      metrics: false,
      maxBodyBytes: 4096,
    });
    const small = await server.listen({ port: 0 });
    try {
      const big = JSON.stringify({ task: 'x', payload: 'y'.repeat(5000) });
      const before = await fingerprint(db);
      const sized = await send('POST', '/api/jobs', { raw: big, url: small.url });
      expect(sized.status).toBe(413);
      expect(errorSchema.parse(sized.body).error).toMatchObject({ field: 'body', code: 'too_large' });
      const stream = new ReadableStream({
        start(controller) {
          controller.enqueue(utf8(big));
          controller.close();
        },
      });
      const chunked = await fetch(`${small.url}/api/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: stream,
        duplex: 'half',
      } as RequestInit);
      expect(chunked.status).toBe(413);
      expect(await fingerprint(db)).toEqual(before);
    } finally {
      await small.close();
    }
  });
});

describe('payloads', () => {
  const BAD: Array<[string, string, string, RegExp]> = [
    ['a number JSON reads as Infinity', '{"task":"t","payload":{"x":1e400}}', 'body.payload.x', /must not be Infinity/],
    ['a lone surrogate escape', '{"task":"t","payload":["\\ud800"]}', 'body.payload.0', /lone surrogates/],
    ['a lone surrogate in a key', '{"task":"t","payload":{"\\udc00":1}}', 'body.payload', /key with lone surrogates/],
    ['a NUL escape', '{"task":"t","payload":{"s":"a\\u0000"}}', 'body.payload.s', /NUL characters/],
    ['a NUL escape in a key', '{"task":"t","payload":{"\\u0000":1}}', 'body.payload', /key with NUL/],
    [
      'nested 1 001 levels',
      `{"task":"t","payload":${'['.repeat(1001)}${']'.repeat(1001)}}`,
      'body.payload',
      /deeper than 1000/,
    ],
    ['nested 100 000 levels', `{"task":"t","payload":${'['.repeat(1e5)}${']'.repeat(1e5)}}`, 'body.payload', /deeper/],
    ['over 1 MiB', JSON.stringify({ task: 't', payload: 'x'.repeat(1024 * 1024) }), 'body.payload', /over the limit/],
    [
      'a bad entry of many',
      JSON.stringify({ jobs: [{ task: 'a' }, { task: 'b', payload: { s: 'x\u0000' } }] }),
      'body.jobs.1.payload.s',
      /NUL/,
    ],
  ];
  it.each(BAD)('refused: %s', async (_name, raw, field, message) => {
    await refused('POST', '/api/jobs', { raw }, field, message);
  });

  it('results and nack errors too, under the body’s field names', async () => {
    const { id } = await db.tusk.enqueue('leased', null, { queue: 'http-bad' });
    const [lease] = await db.tusk.fetch({ queue: 'http-bad' });
    expect(lease?.id).toBe(id);
    const ack = `/api/jobs/${id}/ack`;
    const token = lease?.token as string;
    await refused(
      'POST',
      ack,
      { raw: `{"token":"${token}","result":{"s":"\\ud800"}}` },
      'body.result.s',
      /lone surrogates/,
    );
    await refused('POST', ack, { body: { token, result: 'x'.repeat(1024 * 1024) } }, 'body.result', /limit/);
    await refused('POST', ack, { body: { token: '0' } }, 'body.token', /the token returned by fetch/);
    await refused('POST', ack, { body: { token: 1 } }, 'body.token', /a string of digits/);
    await refused('POST', ack, { body: { token, results: 5 } }, 'body', /did you mean "result"/);
    const nack = `/api/jobs/${id}/nack`;
    await refused('POST', nack, { body: { token, delayMs: 1e300 } }, 'body.delayMs', /from 0 to 2147483647/);
    // before, a 500: PostgreSQL refused them
    await refused('POST', nack, { body: { token, delayMs: 30 * 24 * 3600_000 } }, 'body.delayMs', /to 2147483647/);
    await refused('POST', ack, { body: { token: '9999999999999999999' } }, 'body.token', /up to 9223372036854775807/);
    await refused('POST', nack, { raw: `{"token":"${token}","error":"a\\u0000"}` }, 'body.error', /NUL/);
    await refused('POST', `/api/jobs/${id}/extend`, { body: { token, leaseMs: -1 } }, 'body.leaseMs');
    await refused('POST', `/api/jobs/${id}/extend`, { body: { token, leaseMs: 0 } }, 'body.leaseMs', /at least 1/);
    expect((await send('POST', ack, { body: { token, result: { ok: '✓' } } })).status).toBe(200);
    expect((await db.tusk.getJob(id))?.result).toEqual({ ok: '✓' });
  });

  it('stored exactly: unicode, control characters, SQL-looking text, a __proto__ key', async () => {
    const raw =
      '{"task":"t","payload":{"__proto__":{"polluted":true},"名前":"héllo 👋","s":"\\t\\n\\u001f","q":"\'; DROP TABLE jobs; --"}}';
    const posted = await send('POST', '/api/jobs', { raw });
    expect(posted.status).toBe(201);
    const read = await send('GET', `/api/jobs/${(posted.body as { id: string }).id}`);
    expect((read.body as { payload: unknown }).payload).toEqual(JSON.parse(raw).payload);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('property: any JSON value of storable strings round-trips through POST and GET', async () => {
    await fc.assert(
      fc.asyncProperty(jsonData, async (payload) => {
        const job = await postAndGet({ task: 'round_trip', payload });
        // JSON.stringify sends -0 as 0: what arrives is what the server must keep
        expect(job.payload).toEqual(JSON.parse(JSON.stringify(payload)));
      }),
      { numRuns: 60 },
    );
  });
});

describe('names and options', () => {
  const BAD_NAMES: Array<[string, unknown, RegExp]> = [
    ['empty', '', /must not be empty/],
    ['a newline', 'a\nb', /control characters/],
    ['an escape', '\u001b[31mred', /control characters/],
    ['NUL', 'a\u0000', /NUL characters/],
    ['a lone surrogate', 'a\ud800', /well-formed Unicode/],
    ['too long', 'x'.repeat(201), /at most/],
    ['a number', 7, /must be a string \(got 7\)/],
    ['null', null, /must be a string \(got null\)/],
  ];
  it.each(BAD_NAMES)('refused as task, tenant and queue: %s', async (_name, name, message) => {
    await refused('POST', '/api/jobs', { body: { task: name } }, 'body.task', message);
    await refused('POST', '/api/jobs', { body: { task: 't', tenant: name } }, 'body.tenant', message);
    await refused('POST', '/api/jobs', { body: { task: 't', queue: name } }, 'body.queue', message);
    await refused('POST', '/api/jobs', { body: { jobs: [{ task: 't', queue: name }] } }, 'body.jobs.0.queue', message);
  });

  it('refused in paths and queries', async () => {
    await refused('PATCH', '/api/tenants/a%0Ab', { body: { slots: 1 } }, 'tenant', /control characters/);
    await refused('GET', '/api/tenants/%00', {}, 'tenant', /NUL/);
    await refused('GET', `/api/tenants/${'t'.repeat(129)}`, {}, 'tenant', /at most 128/);
    await refused('GET', '/api/jobs?tenant=%1B', {}, 'query.tenant', /control characters/);
    await refused('GET', '/api/jobs?limit=1e3', {}, 'query.limit', /must be an integer/);
    await refused('GET', '/api/jobs?limt=5', {}, 'query', /did you mean "limit"/);
    await refused('GET', '/api/jobs/1%27%20OR%201=1', {}, 'id', /job id/);
  });

  const BAD_OPTIONS: Array<[string, Record<string, unknown>, string, RegExp]> = [
    ['typo: delay', { delay: 5 }, 'body', /unknown option "delay" \(did you mean "delayMs"\?\)/],
    [
      'typo: max_attempts',
      { max_attempts: 5 },
      'body',
      /unknown option "max_attempts" \(did you mean "maxAttempts"\?\)/,
    ],
    ['delay as a string', { delayMs: '10' }, 'body.delayMs', /must be a number \(got "10"\)/],
    ['delay negative', { delayMs: -1 }, 'body.delayMs', /from 0/],
    ['delay fractional', { delayMs: 0.5 }, 'body.delayMs', /\(got 0\.5\)/],
    ['delay huge', { delayMs: 1e300 }, 'body.delayMs', /\(got 1e\+300\)/],
    ['maxAttempts 0', { maxAttempts: 0 }, 'body.maxAttempts', /from 1 to 1000/],
    ['priority fractional', { priority: 1.5 }, 'body.priority', /\(got 1\.5\)/],
    ['runAt a word', { runAt: 'tomorrow' }, 'body.runAt', /ISO 8601/],
    ['runAt without a time', { runAt: '2030-01-01' }, 'body.runAt', /ISO 8601/],
    ['runAt without a zone', { runAt: '2030-01-01T09:00:00' }, 'body.runAt', /with a time zone/],
    ['runAt month 13', { runAt: '2030-13-01T00:00:00Z' }, 'body.runAt', /ISO 8601/],
    ['runAt in year 0', { runAt: '0000-01-01T00:00:00Z' }, 'body.runAt', /must be a valid Date/],
    ['runAt a number', { runAt: 1893456000000 }, 'body.runAt', /ISO 8601 date-time string \(got 1893456000000\)/],
    ['runAt and delayMs', { runAt: '2030-01-01T00:00:00Z', delayMs: 5 }, 'body', /runAt or delayMs, not both/],
    ['dedupe as a string', { dedupe: 'true' }, 'body.dedupe', /true or false/],
    ['retry a number', { retry: 3 }, 'body.retry', /must be an object \(got 3\)/],
    ['retry backoff by name', { retry: { backoff: 'linear' } }, 'body.retry.backoff', /'exponential' or a number/],
    ['source without id', { source: { type: 'Report' } }, 'body.source.id', /string of 1 to 256/],
    ['a __proto__ key', JSON.parse('{"__proto__": {"delayMs": 5}}'), 'body', /unknown option "__proto__"/],
  ];
  it.each(BAD_OPTIONS)('refused: %s', async (_name, options, field, message) => {
    await refused('POST', '/api/jobs', { body: { task: 't', ...options } }, field, message);
    const inMany = field === 'body' ? 'body.jobs.0' : field.replace(/^body/, 'body.jobs.0');
    await refused('POST', '/api/jobs', { body: { jobs: [{ task: 't', ...options }] } }, inMany, message);
  });

  it('lists of jobs: empty, too many, not a list', async () => {
    await refused('POST', '/api/jobs', { body: { jobs: [] } }, 'body.jobs', /must not be empty/);
    const many = Array.from({ length: 10_001 }, () => ({ task: 't' }));
    await refused('POST', '/api/jobs', { body: { jobs: many } }, 'body.jobs', /at most 10 000 jobs/);
    await refused('POST', '/api/jobs', { body: { jobs: { task: 't' } } }, 'body.jobs');
    await refused('POST', '/api/jobs', { body: { jobs: [{ task: 't' }], task: 't' } }, 'body', /unknown option "task"/);
  });

  it('tenant settings', async () => {
    const path = '/api/tenants/acme';
    await refused('PATCH', path, { body: { slots: '5' } }, 'body.slots', /must be a number \(got "5"\)/);
    await refused('PATCH', path, { body: { slots: 0 } }, 'body.slots', /from 1 to 1000000/);
    await refused('PATCH', path, { body: { perKey: 2.5 } }, 'body.perKey', /\(got 2\.5\)/);
    await refused('PATCH', path, { body: { paused: 'yes' } }, 'body.paused', /true or false/);
    await refused('PATCH', path, { body: { slot: 5 } }, 'body', /did you mean "slots"/);
    await refused('PATCH', path, { raw: '' }, 'body', /required/);
  });

  it('property: any string as a tenant is stored exactly if legal, else a 400 naming body.tenant', async () => {
    await fc.assert(
      fc.asyncProperty(nameLike(128), async (tenant) => {
        if (!isLegalName(tenant, 128)) {
          await refused('POST', '/api/jobs', { body: { task: 't', tenant } }, 'body.tenant');
          return;
        }
        expect((await postAndGet({ task: 't', tenant })).tenant).toBe(tenant);
      }),
      { numRuns: 60 },
    );
  });

  it('property: an option of the wrong JSON type is a 400 naming it', async () => {
    const kinds = OPTION_KINDS;
    const of: Record<string, fc.Arbitrary<unknown>> = {
      string: fc.string({ minLength: 1 }),
      number: fc.integer({ min: 1, max: 9 }),
      boolean: fc.boolean(),
      object: fc.dictionary(fc.constantFrom('a', 'b'), fc.integer()),
      array: fc.array(fc.integer(), { maxLength: 2 }),
      null: fc.constant(null),
    };
    const wrong = (kind: string) =>
      fc.oneof(
        ...Object.entries(of)
          .filter(([k]) => k !== kind && !(kind === 'date' && k === 'string'))
          .map(([, a]) => a),
      );
    const bad = fc
      .constantFrom(...(Object.keys(kinds) as Array<keyof typeof kinds>))
      .chain((key) => wrong(kinds[key]).map((value) => [key, value] as const));
    await fc.assert(
      fc.asyncProperty(bad, async ([key, value]) => {
        await refused('POST', '/api/jobs', { body: { task: 't', [key]: value } }, `body.${key}`);
      }),
      { numRuns: 60 },
    );
  });
});
