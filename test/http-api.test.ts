import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule, { type FormatsPlugin } from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  enqueuedManySchema,
  enqueuedSchema,
  errorSchema,
  fetchedSchema,
  flowIdsSchema,
  jobListSchema,
  jobSchema,
  leaseUntilSchema,
  queueListSchema,
  retriedSchema,
  scheduleListSchema,
  scheduleRemovedSchema,
  scheduleSchema,
  statsSchema,
  tenantListSchema,
  tenantSchema,
  timeseriesSchema,
  whoamiSchema,
  workerListSchema,
} from '../src/http/schemas.js';
import { createServer, type Listening, type TuskServer } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

// ajv-formats is CommonJS: its plugin is the default export's default under NodeNext
const addFormats = (addFormatsModule as unknown as { default: FormatsPlugin }).default;

const db = useTestDb(import.meta.url);
const ADMIN = 'test-admin-token-0123456789abcdef';
let server: TuskServer;
let listening: Listening;
let acmeToken: string;
let globexToken: string;

interface Reply {
  status: number;
  body: unknown;
  headers: Headers;
}

/** Every JSON reply the tests get, checked against the served OpenAPI document at the end. */
const replies: Array<{ method: string; path: string; status: number; body: unknown }> = [];

/** A request to the test server; `token: null` sends none (default: the admin token). */
async function call(
  method: string,
  path: string,
  options: { token?: string | null; body?: unknown; raw?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = {};
  const token = options.token === undefined ? ADMIN : options.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  let body: string | undefined = options.raw;
  // writes say JSON, with a body or without (the server refuses others: 415)
  if (method !== 'GET') headers['content-type'] = 'application/json';
  if (options.body !== undefined) body = JSON.stringify(options.body);
  const response = await fetch(`${listening.url}${path}`, { method, headers, body });
  const text = await response.text();
  const type = response.headers.get('content-type') ?? '';
  if (!type.includes('json')) return { status: response.status, body: text, headers: response.headers };
  const json: unknown = JSON.parse(text);
  replies.push({ method, path: path.split('?')[0] ?? path, status: response.status, body: json });
  return { status: response.status, body: json, headers: response.headers };
}

/** Checks the status and that the body matches the documented schema; returns it typed. */
function expectReply<S extends z.ZodType>(reply: Reply, status: number, schema: S): z.output<S> {
  expect(reply.status, JSON.stringify(reply.body)).toBe(status);
  return schema.parse(reply.body);
}

/** A 400 whose error names `field`. */
function expectInvalid(reply: Reply, field: string, message?: RegExp) {
  const { error } = expectReply(reply, 400, errorSchema);
  expect(error.field).toBe(field);
  expect(error.message.startsWith(field)).toBe(true);
  if (message) expect(error.message).toMatch(message);
}

beforeAll(async () => {
  server = await createServer(db.tusk, { adminToken: ADMIN, metrics: { lagMs: 0 } });
  listening = await server.listen({ port: 0 });
  acmeToken = (await server.tokens.create({ tenant: 'acme', name: 'acme app' })).token;
  globexToken = (await server.tokens.create({ tenant: 'globex' })).token;
});
afterAll(() => listening?.close());

describe('HTTP API', () => {
  it('documents every route in /api/openapi.json, and nothing else', async () => {
    const doc = (await call('GET', '/api/openapi.json', { token: null })).body as {
      openapi: string;
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    expect(doc.openapi).toBe('3.1.0');
    const documented = Object.entries(doc.paths)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    const served = server.app.routes
      .filter((r) => r.method !== 'ALL' && (r.path.startsWith('/api/') || r.path === '/metrics'))
      .map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, '{$1}')}`)
      .sort();
    expect(documented).toEqual([...new Set(served)]);
    expect(documented.length).toBeGreaterThanOrEqual(21);
    for (const ops of Object.values(doc.paths)) for (const op of Object.values(ops)) expect(op.responses).toBeTruthy();
    // the long poll's 429 (too_many_waits, or the rate limit's) carries Retry-After
    expect(doc.paths['/api/jobs/{id}']?.get?.responses['429']).toMatchObject({ headers: { 'Retry-After': {} } });
  });

  it('auth: no token, a wrong token, a revoked token get 401; a tenant token gets 403 on admin routes', async () => {
    expect((await call('GET', '/api/health', { token: null })).status).toBe(200);
    const none = await call('GET', '/api/jobs', { token: null });
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect(expectReply(none, 401, errorSchema).error.message).toMatch(/Authorization: Bearer/);
    expect((await call('GET', '/api/jobs', { token: 'tusk_wrong' })).status).toBe(401);
    expect((await call('GET', '/metrics', { token: null })).status).toBe(401);

    const { token, info } = await server.tokens.create({ name: 'short-lived admin' });
    expect(expectReply(await call('GET', '/api/whoami', { token }), 200, whoamiSchema)).toEqual({
      role: 'admin',
      tenant: null,
      scopes: ['admin'],
      auth: true,
    });
    expect(await server.tokens.revoke(info.id)).toBe(true);
    expect((await call('GET', '/api/whoami', { token })).status).toBe(401);
    const listed = await server.tokens.list();
    expect(listed.find((t) => t.id === info.id)?.revokedAt).toBeInstanceOf(Date);
    // stored hashed: the token itself is nowhere in the table
    const rows = await db.rows(`SELECT * FROM $schema.api_tokens`);
    expect(JSON.stringify(rows)).not.toContain(token.slice(5));

    expect(expectReply(await call('GET', '/api/whoami', { token: acmeToken }), 200, whoamiSchema)).toEqual({
      role: 'tenant',
      tenant: 'acme',
      scopes: ['enqueue', 'read', 'manage', 'lease'],
      auth: true,
    });
    for (const [method, path] of [
      ['GET', '/api/tenants'],
      ['PATCH', '/api/tenants/acme'],
      ['POST', '/api/tenants/acme/pause'],
      ['GET', '/api/queues'],
      ['GET', '/api/workers'],
      ['GET', '/api/stats'],
      ['GET', '/api/timeseries'],
      ['GET', '/metrics'],
    ] as const) {
      const reply = await call(method, path, { token: acmeToken, body: method === 'PATCH' ? {} : undefined });
      expect(reply.status, `${method} ${path}`).toBe(403);
    }
  });

  it('POST /api/jobs: one job, many jobs, dates, deduplication; a tenant token enqueues for its tenant', async () => {
    const one = expectReply(
      await call('POST', '/api/jobs', {
        body: { task: 'report', payload: { q: 1 }, tenant: 'acme', queue: 'reports', priority: 2 },
      }),
      201,
      enqueuedSchema,
    );
    expect(one.deduplicated).toBe(false);
    const job = expectReply(await call('GET', `/api/jobs/${one.id}`), 200, jobSchema);
    expect(job).toMatchObject({ task: 'report', tenant: 'acme', queue: 'reports', priority: 2, state: 'available' });
    expect(job.payload).toEqual({ q: 1 });

    const runAt = new Date(Date.now() + 3_600_000).toISOString();
    const later = expectReply(
      await call('POST', '/api/jobs', { body: { task: 'report', runAt, expiresAt: '2099-01-01T00:00:00+02:00' } }),
      201,
      enqueuedSchema,
    );
    const scheduled = expectReply(await call('GET', `/api/jobs/${later.id}`), 200, jobSchema);
    expect(scheduled.state).toBe('scheduled');
    expect(scheduled.runAt).toBe(runAt);
    expect(scheduled.expiresAt).toBe('2098-12-31T22:00:00.000Z');

    const first = expectReply(
      await call('POST', '/api/jobs', { body: { task: 'dedup', payload: { a: 1 }, dedupe: true } }),
      201,
      enqueuedSchema,
    );
    const again = expectReply(
      await call('POST', '/api/jobs', { body: { task: 'dedup', payload: { a: 1 }, dedupe: true } }),
      201,
      enqueuedSchema,
    );
    expect(again).toEqual({ id: first.id, deduplicated: true });

    const many = expectReply(
      await call('POST', '/api/jobs', {
        token: acmeToken,
        body: { jobs: [{ task: 'bulk', payload: 1 }, { task: 'bulk', payload: 2, tenant: 'acme' }, { task: 'bulk' }] },
      }),
      201,
      enqueuedManySchema,
    );
    expect(many.ids).toHaveLength(3);
    const tenants = await db.rows<{ tenant: string }>(`SELECT tenant FROM $schema.jobs WHERE id = ANY($1::bigint[])`, [
      many.ids,
    ]);
    expect(tenants.map((r) => r.tenant)).toEqual(['acme', 'acme', 'acme']);

    const other = await call('POST', '/api/jobs', { token: acmeToken, body: { task: 'x', tenant: 'globex' } });
    expect(other.status).toBe(403);
    expect(expectReply(other, 403, errorSchema).error.field).toBe('body.tenant');
    const otherInMany = await call('POST', '/api/jobs', {
      token: acmeToken,
      body: { jobs: [{ task: 'x' }, { task: 'x', tenant: 'globex' }] },
    });
    expect(expectReply(otherInMany, 403, errorSchema).error.field).toBe('body.jobs.1.tenant');
  });

  it('bad bodies and parameters: 400 naming the field', async () => {
    expectInvalid(await call('POST', '/api/jobs', { raw: '{"task": ' }), 'body', /not valid JSON/);
    expectInvalid(await call('POST', '/api/jobs', { raw: '' }), 'body', /required/);
    expectInvalid(await call('POST', '/api/jobs', { body: {} }), 'body.task');
    expectInvalid(await call('POST', '/api/jobs', { body: { task: 5 } }), 'body.task', /must be a string/);
    expectInvalid(await call('POST', '/api/jobs', { body: { task: 'x', delayMs: -1 } }), 'body.delayMs');
    expectInvalid(await call('POST', '/api/jobs', { body: { task: 'x', priority: 1.5 } }), 'body.priority');
    expectInvalid(
      await call('POST', '/api/jobs', { body: { task: 'x', runAt: 'tomorrow' } }),
      'body.runAt',
      /ISO 8601/,
    );
    // a day that does not exist is refused, not rolled over to the next month
    for (const runAt of [
      '2030-02-30T09:00:00Z',
      '2031-02-29T09:00:00Z',
      '2030-04-31T09:00:00Z',
      '2030-01-01T24:00:00Z',
    ])
      expectInvalid(await call('POST', '/api/jobs', { body: { task: 'x', runAt } }), 'body.runAt', /ISO 8601/);
    expectInvalid(await call('GET', '/api/jobs?from=2030-02-30T00:00:00Z'), 'query.from', /ISO 8601/);
    expectInvalid(await call('POST', '/api/jobs', { body: { task: 'x', nope: 1 } }), 'body', /unknown option "nope"/);
    expectInvalid(await call('POST', '/api/jobs', { body: { jobs: [] } }), 'body.jobs', /empty/);
    expectInvalid(
      await call('POST', '/api/jobs', { body: { jobs: [{ task: 'a' }, { task: 'b', maxAttempts: 0 }] } }),
      'body.jobs.1.maxAttempts',
    );
    expectInvalid(
      await call('POST', '/api/jobs', { body: { task: 'x', payload: 'x'.repeat(1024 * 1024 + 1) } }),
      'body.payload',
      /over the limit/,
    );
    expectInvalid(
      await call('POST', '/api/jobs', {
        body: { jobs: [{ task: 'a' }, { task: 'b', payload: 'x'.repeat(1024 * 1024 + 1) }] },
      }),
      'body.jobs.1.payload',
      /over the limit/,
    );
    expectInvalid(await call('GET', '/api/jobs/abc'), 'id', /job id/);
    expectInvalid(await call('GET', '/api/jobs?limit=0'), 'query.limit');
    expectInvalid(await call('GET', '/api/jobs?state=done'), 'query.state', /must be one of/);
    expectInvalid(await call('GET', '/api/jobs?cursor=-1'), 'query.cursor');
    expectInvalid(await call('GET', '/api/jobs?color=red'), 'query', /unknown option "color"/);
    expectInvalid(await call('POST', '/api/fetch', { body: { count: 0 } }), 'body.count');
    expectInvalid(await call('POST', '/api/jobs/1/ack', { body: {} }), 'body.token');
    expectInvalid(await call('POST', '/api/jobs/1/ack', { raw: '' }), 'body');
    expectInvalid(await call('POST', '/api/jobs/1/nack', { body: { token: '1', delayMs: 'soon' } }), 'body.delayMs');
    expectInvalid(await call('POST', '/api/jobs/1/extend', { body: { token: '1' } }), 'body.leaseMs');
    expectInvalid(await call('PATCH', '/api/tenants/acme', { body: { slots: 0 } }), 'body.slots');
    expectInvalid(await call('POST', '/api/jobs/retry', { body: { state: 'succeeded' } }), 'body.state');
    expectInvalid(await call('GET', '/api/stats?windowMs=-5'), 'query.windowMs');
    expectInvalid(await call('GET', '/api/timeseries?minutes=1440&bucketSeconds=10'), 'query.bucketSeconds');
    expectInvalid(await call('GET', '/api/timeseries?minutes=43201'), 'query.minutes');
    // the dashboard's longest range: a week in 2-hour buckets
    const week = expectReply(
      await call('GET', '/api/timeseries?minutes=10080&bucketSeconds=7200'),
      200,
      timeseriesSchema,
    );
    expect(week.buckets.length).toBeGreaterThanOrEqual(84);
    expect(week.buckets.length).toBeLessThanOrEqual(85);
    expect((await call('GET', '/api/nothing')).status).toBe(404);
    // bad path parameters, and a body over the limit (the replies are checked against the
    // document at the end: their statuses must be documented)
    expectInvalid(await call('POST', '/api/jobs/0/cancel'), 'id');
    expectInvalid(await call('DELETE', '/api/jobs/abc'), 'id');
    expectInvalid(await call('GET', `/api/tenants/${'t'.repeat(129)}`), 'tenant');
    const big = await call('POST', '/api/jobs', {
      raw: JSON.stringify({ task: 'x', payload: 'x'.repeat(3 * 1024 * 1024) }),
    });
    expect(big.status).toBe(413);
  });

  it('a body over the limit: 413', async () => {
    const small = await createServer(db.tusk, {
      adminToken: ADMIN,
      maxBodyBytes: 1000,
      dashboard: false,
      metrics: false,
    });
    const response = await small.app.request('/api/jobs', {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'x', payload: 'y'.repeat(2000) }),
    });
    expect(response.status).toBe(413);
    expect(((await response.json()) as { error: { field: string } }).error.field).toBe('body');
  });

  it('a schema that was never migrated: 503 saying so', async () => {
    const bare = await createServer(db.another({ schema: `${db.schema}_none` }), {
      adminToken: ADMIN,
      dashboard: false,
      metrics: false,
    });
    for (const path of ['/api/jobs', '/api/jobs/1', '/api/workers']) {
      const response = await bare.app.request(path, { headers: { authorization: `Bearer ${ADMIN}` } });
      expect(response.status, path).toBe(503);
      expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(/tusk migrate/);
    }
  });

  it('GET /api/jobs: filters and keyset paging, newest first; a tenant token lists its own jobs', async () => {
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 7 }, (_, i) => ({ task: 'paged', tenant: i % 2 ? 'acme' : 'globex', queue: `q${i % 3}` })),
    );
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: z.output<typeof jobListSchema> = expectReply(
        await call('GET', `/api/jobs?task=paged&limit=3${cursor ? `&cursor=${cursor}` : ''}`),
        200,
        jobListSchema,
      );
      expect(page.jobs.length).toBe(pages < 2 ? 3 : 1);
      seen.push(...page.jobs.map((j) => j.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());

    const acme = expectReply(await call('GET', '/api/jobs?task=paged&tenant=acme'), 200, jobListSchema);
    expect(acme.jobs.map((j) => j.id)).toEqual(ids.filter((_, i) => i % 2).reverse());
    const q1 = expectReply(await call('GET', '/api/jobs?task=paged&queue=q1&tenant=acme'), 200, jobListSchema);
    expect(q1.jobs.map((j) => j.id)).toEqual([ids[1]]);
    expect(expectReply(await call('GET', '/api/jobs?task=paged&state=succeeded'), 200, jobListSchema).jobs).toEqual([]);

    // finished jobs come from the history, merged in id order with the waiting ones
    const [job] = await db.tusk.fetch({ tenant: 'globex', count: 1 });
    if (!job) throw new Error('nothing fetched');
    await db.tusk.ack(job, { done: true });
    const all = expectReply(await call('GET', '/api/jobs?task=paged'), 200, jobListSchema);
    expect(all.jobs.map((j) => j.id)).toEqual([...ids].reverse());
    expect(all.jobs.find((j) => j.id === job.id)?.state).toBe('succeeded');
    const done = expectReply(await call('GET', '/api/jobs?task=paged&state=succeeded'), 200, jobListSchema);
    expect(done.jobs.map((j) => j.id)).toEqual([job.id]);

    const mine = expectReply(await call('GET', '/api/jobs?task=paged', { token: acmeToken }), 200, jobListSchema);
    expect(mine.jobs.length).toBe(3);
    expect(mine.jobs.every((j) => j.tenant === 'acme')).toBe(true);
    expect((await call('GET', '/api/jobs?tenant=globex', { token: acmeToken })).status).toBe(403);
  });

  it('GET /api/jobs?from=&to=: jobs created in a time range (from included, to not), waiting or finished', async () => {
    const { ids } = await db.tusk.enqueueMany(Array.from({ length: 3 }, () => ({ task: 'timed', queue: 'timed' })));
    const [a, b, c] = ids as [string, string, string];
    await db.rows(`UPDATE $schema.jobs SET created_at = $2 WHERE id = $1`, [a, '2020-01-01T00:00:00Z']);
    await db.rows(`UPDATE $schema.jobs SET created_at = $2 WHERE id = $1`, [b, '2020-01-02T00:00:00Z']);
    const [job] = await db.tusk.fetch({ count: 1, queue: 'default' });
    if (job?.id === a)
      await db.tusk.ack(job); // a finished one comes from the history
    else if (job) await db.tusk.nack(job);
    const list = async (range: string) =>
      expectReply(await call('GET', `/api/jobs?task=timed&${range}`), 200, jobListSchema).jobs.map((j) => j.id);
    expect(await list('from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z')).toEqual([a]);
    expect(await list('from=2020-01-01T12:00:00%2B02:00&to=2020-01-03T00:00:00Z')).toEqual([b]);
    expect(await list('from=2020-01-01T00:00:00Z')).toEqual([c, b, a]);
    expect(await list(`to=${encodeURIComponent(new Date(Date.now() - 60_000).toISOString())}`)).toEqual([b, a]);
    expectInvalid(await call('GET', '/api/jobs?from=2020-01-01T00:00:00'), 'query.from', /time zone/);
    await Promise.all(ids.map((id) => db.tusk.cancel(id)));
  });

  it("GET /api/jobs/:id: another tenant's token gets 404, the same as for no job at all", async () => {
    const { id } = await db.tusk.enqueue('secret', { x: 1 }, { tenant: 'globex' });
    expect(expectReply(await call('GET', `/api/jobs/${id}`, { token: globexToken }), 200, jobSchema).id).toBe(id);
    const hidden = await call('GET', `/api/jobs/${id}`, { token: acmeToken });
    const missing = await call('GET', '/api/jobs/999999999', { token: acmeToken });
    expect(hidden.status).toBe(404);
    expect(hidden.body).toEqual(missing.body);
    expect((await call('POST', `/api/jobs/${id}/cancel`, { token: acmeToken })).status).toBe(404);
    expect((await call('POST', `/api/jobs/${id}/retry`, { token: acmeToken })).status).toBe(404);
    expect((await call('POST', `/api/jobs/${id}/ack`, { token: acmeToken, body: { token: '1' } })).status).toBe(404);
    expect((await call('GET', '/api/tenants/globex', { token: acmeToken })).status).toBe(404);
    expect(expectReply(await call('GET', '/api/tenants/acme', { token: acmeToken }), 200, tenantSchema).tenant).toBe(
      'acme',
    );
  });

  it('cancel and retry: a waiting job is cancelled, then retried; a waiting job cannot be retried (409)', async () => {
    const { id } = await db.tusk.enqueue('cancel-me', null, { tenant: 'acme' });
    const retryWaiting = await call('POST', `/api/jobs/${id}/retry`, { token: acmeToken });
    expect(expectReply(retryWaiting, 409, errorSchema).error.message).toMatch(/is available/);
    expect(await call('POST', `/api/jobs/${id}/cancel`, { token: acmeToken })).toMatchObject({
      status: 200,
      body: { state: 'cancelled' },
    });
    expect((await db.tusk.getJob(id))?.state).toBe('cancelled');
    expect(await call('POST', `/api/jobs/${id}/retry`, { token: acmeToken })).toMatchObject({
      status: 200,
      body: { state: 'available' },
    });
    expect((await db.tusk.getJob(id))?.state).toBe('available');
    expect((await call('POST', '/api/jobs/999999999/cancel')).status).toBe(404);
  });

  it('POST /api/jobs/retry runs again the dead jobs matching the filter', async () => {
    const { ids } = await db.tusk.enqueueMany([
      { task: 'doomed', tenant: 'acme', maxAttempts: 1, queue: 'doom' },
      { task: 'doomed', tenant: 'globex', maxAttempts: 1, queue: 'doom' },
    ]);
    for (const job of await db.tusk.fetch({ queue: 'doom', count: 2 })) {
      expect(await db.tusk.nack(job, { error: 'no' })).toBe('dead');
    }
    expect(
      expectReply(
        await call('POST', '/api/jobs/retry', { token: acmeToken, body: { task: 'doomed' } }),
        200,
        retriedSchema,
      ),
    ).toEqual({ retried: 1 });
    expect((await db.tusk.getJob(ids[0] as string))?.state).toBe('available');
    expect((await db.tusk.getJob(ids[1] as string))?.state).toBe('dead');
    expect(await call('POST', '/api/jobs/retry', { raw: '' })).toMatchObject({ status: 200, body: { retried: 1 } });
  });

  it('workers anywhere: fetch, extend, ack, nack over HTTP, fenced by lease token', async () => {
    const { ids } = await db.tusk.enqueueMany([
      { task: 'remote', tenant: 'acme', queue: 'remote', maxAttempts: 2 },
      { task: 'remote', tenant: 'acme', queue: 'remote', maxAttempts: 2 },
      { task: 'remote', tenant: 'globex', queue: 'remote' },
    ]);
    const fetched = expectReply(
      await call('POST', '/api/fetch', { token: acmeToken, body: { queue: 'remote', count: 5, leaseMs: 5_000 } }),
      200,
      fetchedSchema,
    );
    expect(fetched.jobs.map((j) => j.id).sort()).toEqual([ids[0], ids[1]].sort());
    expect(fetched.jobs.every((j) => j.tenant === 'acme' && j.attempt === 1 && /^\d+$/.test(j.token))).toBe(true);
    const [a, b] = fetched.jobs as [(typeof fetched.jobs)[0], (typeof fetched.jobs)[0]];

    const extended = expectReply(
      await call('POST', `/api/jobs/${a.id}/extend`, { token: acmeToken, body: { token: a.token, leaseMs: 60_000 } }),
      200,
      leaseUntilSchema,
    );
    expect(new Date(extended.leaseUntil).getTime()).toBeGreaterThan(new Date(a.leaseUntil).getTime());
    expect(extended.cancelRequested).toBe(false);
    // a cancel asked for meanwhile: the consumer learns it from its next extend (WORKING)
    expect(await db.tusk.cancel(b.id)).toBe('running');
    const told = expectReply(
      await call('POST', `/api/jobs/${b.id}/extend`, { token: acmeToken, body: { token: b.token, leaseMs: 60_000 } }),
      200,
      leaseUntilSchema,
    );
    expect(told.cancelRequested).toBe(true);
    expect(
      await call('POST', `/api/jobs/${a.id}/ack`, { token: acmeToken, body: { token: a.token, result: { rows: 3 } } }),
    ).toMatchObject({ status: 200, body: { ok: true } });
    const acked = expectReply(await call('GET', `/api/jobs/${a.id}`), 200, jobSchema);
    expect(acked).toMatchObject({ state: 'succeeded', result: { rows: 3 } });
    const twice = await call('POST', `/api/jobs/${a.id}/ack`, { body: { token: a.token } });
    expect(expectReply(twice, 409, errorSchema).error.code).toBe('lease_lost');

    expect(
      await call('POST', `/api/jobs/${b.id}/nack`, {
        token: acmeToken,
        body: { token: b.token, delayMs: 60_000, error: 'upstream down' },
      }),
    ).toMatchObject({ status: 200, body: { state: 'cancelled' } });
    const nacked = expectReply(await call('GET', `/api/jobs/${b.id}`), 200, jobSchema);
    expect(nacked.errors.at(-1)?.message).toBe('upstream down');
    expect((await call('POST', `/api/jobs/${b.id}/extend`, { body: { token: b.token, leaseMs: 1000 } })).status).toBe(
      409,
    );

    const globex = expectReply(await call('POST', '/api/fetch', { body: { queue: 'remote' } }), 200, fetchedSchema);
    expect(globex.jobs.map((j) => j.id)).toEqual([ids[2]]);
    expect(
      expectReply(await call('POST', '/api/fetch', { body: { queue: 'remote' } }), 200, fetchedSchema).jobs,
    ).toEqual([]);
  });

  it('dependencies: POST /api/jobs with dependsOn, POST /api/flows; a tenant token names only its own jobs', async () => {
    const first = expectReply(
      await call('POST', '/api/jobs', { token: acmeToken, body: { task: 'make', queue: 'http-deps' } }),
      201,
      enqueuedSchema,
    );
    const dependent = expectReply(
      await call('POST', '/api/jobs', {
        token: acmeToken,
        body: { task: 'use', queue: 'http-deps', dependsOn: [first.id], onDependencyFailure: 'continue' },
      }),
      201,
      enqueuedSchema,
    );
    expect(expectReply(await call('GET', `/api/jobs/${dependent.id}`), 200, jobSchema)).toMatchObject({
      state: 'scheduled',
      waitingOn: 1,
      dependsOn: [first.id],
    });
    // ids as numbers too; in many jobs
    const many = expectReply(
      await call('POST', '/api/jobs', {
        body: { jobs: [{ task: 'use', queue: 'http-deps', dependsOn: [Number(first.id)] }] },
      }),
      201,
      enqueuedManySchema,
    );
    expect(expectReply(await call('GET', `/api/jobs/${many.ids[0]}`), 200, jobSchema).waitingOn).toBe(1);

    expectInvalid(
      await call('POST', '/api/jobs', { body: { task: 'use', dependsOn: [first.id, '9000000000000000000'] } }),
      'body.dependsOn.1',
      /is not a job/,
    );
    expectInvalid(
      await call('POST', '/api/jobs', { body: { jobs: [{ task: 'a' }, { task: 'use', dependsOn: ['x'] }] } }),
      'body.jobs.1.dependsOn.0',
      /must be a job id/,
    );
    expectInvalid(
      await call('POST', '/api/jobs', { body: { task: 'use', dependsOn: [first.id], dedupKey: 'k' } }),
      'body',
      /not deduplicated/,
    );
    // another tenant's job is no job to this token
    const globexJob = expectReply(
      await call('POST', '/api/jobs', { token: globexToken, body: { task: 'g' } }),
      201,
      enqueuedSchema,
    );
    expectInvalid(
      await call('POST', '/api/jobs', { token: acmeToken, body: { task: 'use', dependsOn: [first.id, globexJob.id] } }),
      'body.dependsOn.1',
      /is not a job: no job has id/,
    );
    expectInvalid(
      await call('POST', '/api/jobs', {
        token: acmeToken,
        body: { jobs: [{ task: 'a' }, { task: 'use', dependsOn: [globexJob.id] }] },
      }),
      'body.jobs.1.dependsOn.0',
      /is not a job/,
    );

    const flow = expectReply(
      await call('POST', '/api/flows', {
        token: acmeToken,
        body: {
          task: 'assemble',
          queue: 'http-flow',
          runAt: new Date(Date.now() + 60_000).toISOString(),
          children: [
            { task: 'part', queue: 'http-flow', payload: { n: 1 } },
            { task: 'part', queue: 'http-flow', children: [{ task: 'leaf', dependsOn: [first.id] }] },
          ],
        },
      }),
      201,
      flowIdsSchema,
    );
    const tree = flow as { id: string; children: Array<{ id: string; children: Array<{ id: string }> }> };
    expect(tree.children).toHaveLength(2);
    const top = expectReply(await call('GET', `/api/jobs/${tree.id}`), 200, jobSchema);
    expect(top).toMatchObject({ tenant: 'acme', state: 'scheduled', waitingOn: 2 });
    expect(top.dependsOn).toEqual(tree.children.map((c) => c.id));
    const leaf = expectReply(await call('GET', `/api/jobs/${tree.children[1]?.children[0]?.id}`), 200, jobSchema);
    expect(leaf).toMatchObject({ tenant: 'acme', waitingOn: 1, dependsOn: [first.id] });

    expectInvalid(
      await call('POST', '/api/flows', {
        body: { task: 'p', children: [{ task: 'c' }, { task: 'c', children: [{ task: 5 }] }] },
      }),
      'body.children.1.children.0.task',
    );
    expectInvalid(
      await call('POST', '/api/flows', { body: { task: 'p', children: [{ task: 'c', dedupKey: 'k' }] } }),
      'body.children.0',
      /unknown option "dedupKey"/,
    );
    expectInvalid(
      await call('POST', '/api/flows', {
        body: { task: 'p', children: [{ task: 'c', onDependencyFailure: 'continue' }] },
      }),
      'body.children.0.onDependencyFailure',
    );
    expectInvalid(
      await call('POST', '/api/flows', {
        token: acmeToken,
        body: { task: 'p', children: [{ task: 'c', dependsOn: [globexJob.id] }] },
      }),
      'body.children.0.dependsOn.0',
      /is not a job/,
    );
    let deep: Record<string, unknown> = { task: 'link' };
    for (let i = 1; i < 501; i++) deep = { task: 'link', children: [deep] };
    expectInvalid(
      await call('POST', '/api/flows', { body: deep }),
      `body${'.children.0'.repeat(500)}`,
      /at most 500 levels/,
    );
    const otherTenant = await call('POST', '/api/flows', {
      token: acmeToken,
      body: { task: 'p', children: [{ task: 'c', tenant: 'globex' }] },
    });
    expect(expectReply(otherTenant, 403, errorSchema).error.field).toBe('body.children.0.tenant');

    // a leased job says what it depends on
    await db.tusk.cancel(many.ids[0] as string);
    const [lease] = await db.tusk.fetch({ queue: 'http-deps' });
    await db.tusk.ack(lease as { id: string; token: string });
    const fetched = expectReply(
      await call('POST', '/api/fetch', { token: acmeToken, body: { queue: 'http-deps' } }),
      200,
      fetchedSchema,
    );
    expect(fetched.jobs).toMatchObject([{ id: dependent.id, dependsOn: [first.id] }]);
  });

  it('tenants: list, get, set slots, pause and resume', async () => {
    const set = expectReply(
      await call('PATCH', '/api/tenants/initech', { body: { slots: 3, perKey: 1 } }),
      200,
      tenantSchema,
    );
    expect(set).toMatchObject({ tenant: 'initech', slots: 3, ownSlots: 3, perKey: 1, paused: false });
    expect(expectReply(await call('POST', '/api/tenants/initech/pause'), 200, tenantSchema).paused).toBe(true);
    const list = expectReply(await call('GET', '/api/tenants'), 200, tenantListSchema);
    expect(list.tenants.find((t) => t.tenant === 'initech')).toMatchObject({ slots: 3, paused: true });
    expect(expectReply(await call('POST', '/api/tenants/initech/resume'), 200, tenantSchema).paused).toBe(false);
    expect(
      expectReply(await call('PATCH', '/api/tenants/initech', { body: { slots: null } }), 200, tenantSchema).ownSlots,
    ).toBe(null);
    expect((await call('GET', '/api/tenants/nobody-at-all')).status).toBe(404);
  });

  it("tenants: rate limit and retention set and shown; why each tenant's jobs wait", async () => {
    // the day's one start, used below, is read back within the same day
    await db.roomInWindow(86_400_000, 15_000);
    const set = expectReply(
      await call('PATCH', '/api/tenants/metered', {
        body: { rate: { limit: 1, perMs: 86_400_000 }, retention: '30 day' },
      }),
      200,
      tenantSchema,
    );
    expect(set).toMatchObject({ rate: { limit: 1, perMs: 86_400_000 }, retention: '30 days', ownRetention: '30 days' });
    expectInvalid(
      await call('PATCH', '/api/tenants/metered', { body: { rate: { limit: 0, perMs: 1000 } } }),
      'body.rate.limit',
    );
    expectInvalid(await call('PATCH', '/api/tenants/metered', { body: { retention: 'forever' } }), 'body.retention');
    await call('PATCH', '/api/tenants/narrow', { body: { slots: 1 } });
    await call('PATCH', '/api/tenants/held', { body: { paused: true } });
    await db.tusk.queues.pause('parked');
    await db.tusk.enqueueMany([
      ...['metered', 'metered', 'narrow', 'narrow', 'held', 'ready'].map((tenant) => ({
        task: 'w',
        tenant,
        queue: 'why',
      })),
      { task: 'w', tenant: 'parked', queue: 'parked' },
      { task: 'w', tenant: 'later', queue: 'why', delayMs: 3_600_000 },
    ]);
    // one start each for the metered and the narrow tenants: then their rate and their slot are used up
    for (const tenant of ['metered', 'narrow']) {
      const { jobs } = expectReply(
        await call('POST', '/api/fetch', { body: { tenant, queue: 'why', count: 2 } }),
        200,
        fetchedSchema,
      );
      expect(jobs).toHaveLength(1);
    }
    const { tenants } = expectReply(await call('GET', '/api/tenants'), 200, tenantListSchema);
    const why = Object.fromEntries(tenants.map((t) => [t.tenant, t.waitReasons]));
    expect(why).toMatchObject({
      metered: ['rate_limited'],
      narrow: ['slots_full'],
      held: ['paused'],
      parked: ['queue_paused'],
      ready: ['worker'],
      later: ['scheduled'],
    });
    const metered = tenants.find((t) => t.tenant === 'metered');
    const resets = Date.parse(metered?.rateResetsAt ?? '');
    expect(resets).toBeGreaterThan(Date.now());
    expect(resets % 86_400_000).toBe(0); // windows are aligned to the epoch
    const later = tenants.find((t) => t.tenant === 'later');
    expect(Date.parse(later?.nextRunAt ?? '') - Date.now()).toBeGreaterThan(3_500_000);
    expect(later?.oldestWaitingMs).toBeNull(); // none of its jobs can run now
    expect(tenants.find((t) => t.tenant === 'ready')).toMatchObject({ rateResetsAt: null, nextRunAt: null });
    await db.tusk.queues.resume('parked');
    await db.tusk.tenants.resume('held');
  });

  it('schedules: listed with their next tick, last tick and last job; removed (404 for none); admin only', async () => {
    await db.tusk.schedules.set('nightly', '0 3 * * *', { task: 'report', tenant: 'acme', tz: 'Europe/Paris' });
    await db.tusk.schedules.set('every-second', '* * * * * *', { task: 'tick', queue: 'cron' });
    await db.tusk.upkeep().runOnce(); // enqueues the ticks due soon
    const { schedules } = expectReply(await call('GET', '/api/schedules'), 200, scheduleListSchema);
    expect(schedules.map((s) => s.name)).toEqual(['every-second', 'nightly']);
    const [everySecond, nightly] = schedules;
    expect(nightly).toMatchObject({ cron: '0 3 * * *', tz: 'Europe/Paris', task: 'report', tenant: 'acme' });
    expect(nightly).toMatchObject({ queue: 'default', source: 'api', lastRunAt: null, lastJobId: null });
    expect(Date.parse(nightly?.nextRunAt ?? '')).toBeGreaterThan(Date.now());
    expect(everySecond).toMatchObject({ tz: 'UTC', task: 'tick', queue: 'cron' });
    const lastJob = await db.tusk.getJob(everySecond?.lastJobId ?? '0');
    expect(lastJob).toMatchObject({ task: 'tick', queue: 'cron', runAt: new Date(everySecond?.lastRunAt ?? '') });

    expect((await call('GET', '/api/schedules', { token: acmeToken })).status).toBe(403);
    expect((await call('DELETE', '/api/schedules/nightly', { token: acmeToken })).status).toBe(403);
    expect(expectReply(await call('DELETE', '/api/schedules/every-second'), 200, scheduleRemovedSchema)).toEqual({
      name: 'every-second',
      removed: true,
    });
    expect(await db.tusk.schedules.get('every-second')).toBeNull();
    expect((await db.tusk.getJob(lastJob?.id ?? '0'))?.state).toBe('cancelled'); // its tick enqueued ahead
    expect(expectReply(await call('DELETE', '/api/schedules/every-second'), 404, errorSchema).error.code).toBe(
      'not_found',
    );
    expectInvalid(await call('DELETE', `/api/schedules/${'x'.repeat(201)}`), 'name');

    // paused and resumed; 404 for none; admin only
    expect((await call('POST', '/api/schedules/nightly/pause', { token: acmeToken })).status).toBe(403);
    const paused = expectReply(await call('POST', '/api/schedules/nightly/pause'), 200, scheduleSchema);
    expect(paused).toMatchObject({ name: 'nightly', pausedAt: expect.any(String) });
    expect((await db.tusk.schedules.get('nightly'))?.pausedAt).toBeInstanceOf(Date);
    const resumed = expectReply(await call('POST', '/api/schedules/nightly/resume'), 200, scheduleSchema);
    expect(resumed.pausedAt).toBeNull();
    expect(expectReply(await call('POST', '/api/schedules/none/pause'), 404, errorSchema).error.code).toBe('not_found');
    await db.tusk.schedules.remove('nightly');
  });

  it('monitoring: stats, queues, workers, timeseries and /metrics follow a worker of another instance', async () => {
    const before = await scrape();
    const other = db.another();
    const { ids } = await other.enqueueMany(
      Array.from({ length: 6 }, (_, i) => ({
        task: i < 4 ? 'ok' : 'boom',
        queue: 'watched',
        tenant: 'acme',
        maxAttempts: 1,
      })),
    );
    const worker = db.worker(
      {
        tasks: {
          ok: async () => {
            await new Promise((r) => setTimeout(r, 30));
            return 1;
          },
          boom: async () => {
            throw new Error('boom');
          },
        },
        queues: ['watched'],
        concurrency: 2,
      },
      other,
    );
    await worker.start();
    const workersNow = expectReply(await call('GET', '/api/workers'), 200, workerListSchema);
    expect(workersNow.workers.some((w) => w.alive && w.concurrency === 2)).toBe(true);
    await eventually(async () => {
      const states = await Promise.all(ids.map((id) => other.getJob(id)));
      return states.every((j) => j?.state === 'succeeded' || j?.state === 'dead');
    });
    await worker.stop();

    const stats = expectReply(await call('GET', '/api/stats'), 200, statsSchema);
    expect(stats.queues.find((q) => q.queue === 'watched')?.counts).toMatchObject({ succeeded: 4, dead: 2 });
    // by task, across tenants and queues, from the same scan
    expect(stats.tasks.find((t) => t.task === 'ok')?.counts).toMatchObject({ succeeded: 4, dead: 0 });
    expect(stats.tasks.find((t) => t.task === 'boom')?.counts).toMatchObject({ succeeded: 0, dead: 2 });
    const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0);
    expect(stats.tasks.reduce((n, t) => n + total(t.counts), 0)).toBe(total(stats.total.counts));
    const queues = expectReply(await call('GET', '/api/queues'), 200, queueListSchema);
    expect(queues.queues.find((q) => q.queue === 'watched')?.counts.succeeded).toBe(4);
    const series = expectReply(await call('GET', '/api/timeseries?minutes=10&queue=watched'), 200, timeseriesSchema);
    expect(series.buckets.length).toBeGreaterThanOrEqual(10);
    expect(series.buckets.reduce((n, b) => n + b.succeeded, 0)).toBe(4);
    expect(series.buckets.reduce((n, b) => n + b.dead, 0)).toBe(2);
    expect(series.buckets.reduce((n, b) => n + b.enqueued, 0)).toBe(6);
    expect(series.buckets.some((b) => (b.runP95 ?? 0) >= 30)).toBe(true);

    const after = await scrape();
    const delta = (name: string) => (after.get(name) ?? 0) - (before.get(name) ?? 0);
    expect(delta('tusk_jobs_claimed_total{queue="watched",tenant="acme"}')).toBe(6);
    expect(delta('tusk_jobs_failed_total{queue="watched",tenant="acme"}')).toBe(2);
    expect(delta('tusk_jobs_finished_total{queue="watched",tenant="acme",state="succeeded"}')).toBe(4);
    expect(delta('tusk_jobs_finished_total{queue="watched",tenant="acme",state="dead"}')).toBe(2);
    expect(delta('tusk_job_run_seconds_count{queue="watched"}')).toBe(6);
    expect(delta('tusk_job_wait_seconds_count{queue="watched"}')).toBe(6);
    // the others take 30 ms; the failing jobs throw at once, which a loaded machine may
    // still stretch past 25 ms: the bucket holds what the history says
    const [fast] = await db.rows<{ n: number }>(
      `SELECT count(*)::integer AS n FROM $schema.job_history WHERE queue = 'watched' AND run_ms <= 25`,
    );
    expect(fast?.n).toBeLessThanOrEqual(2);
    expect(after.get('tusk_job_run_seconds_bucket{queue="watched",le="0.025"}') ?? 0).toBe(fast?.n);
    expect(after.get('tusk_job_run_seconds_bucket{queue="watched",le="+Inf"}')).toBe(6);
    expect(after.get('tusk_job_run_seconds_sum{queue="watched"}')).toBeGreaterThanOrEqual(0.12);
    expect(after.get('tusk_jobs{queue="watched",tenant="acme",state="available"}')).toBe(0);
    expect(after.get('tusk_workers_alive')).toBe(0);

    // nothing more happened: the counters stay
    const again = await scrape();
    expect(again.get('tusk_jobs_claimed_total{queue="watched",tenant="acme"}')).toBe(
      after.get('tusk_jobs_claimed_total{queue="watched",tenant="acme"}'),
    );
    await db.tusk.enqueue('later', null, { queue: 'watched', tenant: 'acme' });
    const waiting = await scrape();
    expect(waiting.get('tusk_jobs{queue="watched",tenant="acme",state="available"}')).toBe(1);
    expect(waiting.get('tusk_oldest_waiting_seconds{queue="watched",tenant="acme"}')).toBeGreaterThanOrEqual(0);
  });

  // last: the replies of every test above, each against its route's documented response
  it('every JSON reply above matches the schema /api/openapi.json gives for its route and status', async () => {
    const doc = (await call('GET', '/api/openapi.json', { token: null })).body as {
      paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, unknown> }> }>>;
    };
    const ajv = new Ajv2020({ allErrors: true, strict: false, logger: false });
    addFormats(ajv);
    ajv.addSchema(doc, 'openapi');
    // a literal segment wins over a parameter: /api/jobs/stats before /api/jobs/{id}
    const routes = Object.keys(doc.paths)
      .map((route) => ({ route, re: new RegExp(`^${route.replace(/\{\w+\}/g, '[^/]+')}$`) }))
      .sort((a, b) => a.route.split('{').length - b.route.split('{').length);
    const pointer = (...parts: string[]) =>
      parts.map((p) => encodeURIComponent(p.replaceAll('~', '~0').replaceAll('/', '~1'))).join('/');
    const wrong: string[] = [];
    for (const r of replies) {
      const route = routes.find((x) => x.re.test(r.path))?.route;
      if (!route) continue; // a path the API does not have (its 404)
      const method = r.method.toLowerCase();
      const what = `${r.method} ${route} ${r.status}`;
      if (!doc.paths[route]?.[method]?.responses[r.status]?.content?.['application/json']) {
        wrong.push(`${what}: not documented`);
        continue;
      }
      const validate = ajv.getSchema(
        `openapi#/${pointer('paths', route, method, 'responses', String(r.status), 'content', 'application/json', 'schema')}`,
      );
      if (!validate?.(r.body))
        wrong.push(`${what}: ${ajv.errorsText(validate?.errors)} in ${JSON.stringify(r.body).slice(0, 300)}`);
    }
    expect(wrong).toEqual([]);
    expect(replies.length).toBeGreaterThan(100);
  });
});

/** /metrics as a map of `name{labels}` → value. */
async function scrape(): Promise<Map<string, number>> {
  const reply = await call('GET', '/metrics');
  expect(reply.status).toBe(200);
  expect(reply.headers.get('content-type')).toMatch(/^text\/plain/);
  const values = new Map<string, number>();
  for (const line of String(reply.body).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    values.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return values;
}

describe('HTTP server connections', () => {
  it('an idle connection of its read pool terminated (pg_terminate_backend): the server goes on, the next request is served', async () => {
    const fresh = await createServer(db.another(), { adminToken: ADMIN });
    const up = await fresh.listen({ port: 0 });
    try {
      const workers = () => fetch(`${up.url}/api/workers`, { headers: { authorization: `Bearer ${ADMIN}` } });
      // a route that reads through the read pool alone: its connection then waits, idle
      expect((await workers()).status).toBe(200);
      const killed = await db.rows<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
         WHERE application_name = 'tusk http reads' AND state = 'idle' AND query LIKE '%' || $1 || '%'`,
        [db.schema],
      );
      expect(killed.length).toBeGreaterThan(0);
      await eventually(async () => (await workers()).status === 200);
    } finally {
      await up.close();
    }
  });
});
