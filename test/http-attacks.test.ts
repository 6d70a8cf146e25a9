// The HTTP server against a hostile tenant and a careless operator: each attack as it was
// made, and what the server does now. Tokens for tenants alpha and bravo, and an admin.
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { Hono } from 'hono';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ApiTokens } from '../src/http/tokens.js';
import { createServer, type Listening, TuskError, type TuskServer } from '../src/index.js';
import { selectTenantJob } from '../src/queries/tenantJob.js';
import { eventually, recorder, sleep, useTestDb } from './helpers.js';
import { CHROMIUM, chromiumPresent, needs } from './services.js';

const ADMIN = `attack-admin-${randomBytes(16).toString('hex')}`;
const MiB = 1024 * 1024;

/** The main schema: an admin token, tokens for alpha and bravo. */
const db = useTestDb(import.meta.url);
/** A schema where no token is ever made: servers without auth. */
const bare = useTestDb(`${import.meta.url}-bare`);
/** A schema with one token, revoked in the test. */
const lone = useTestDb(`${import.meta.url}-lone`);

interface Reply {
  status: number;
  body: string;
  headers: http.IncomingHttpHeaders;
  /** The error code of a JSON error body. */
  code: string | undefined;
}

/** One request, with the headers given as they are (Host and Origin included). */
function request(
  url: string,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, path, method: options.method ?? 'GET', headers: options.headers });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers, code: errorCode(body) }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

function errorCode(body: string): string | undefined {
  try {
    return (JSON.parse(body) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const json = { 'content-type': 'application/json' };

let server: TuskServer;
let listening: Listening;
let alpha: string;
let bravo: string;
const main = recorder();

beforeAll(async () => {
  server = await createServer(db.another({ logger: main.log }), { adminToken: ADMIN, metrics: { lagMs: 0 } });
  listening = await server.listen({ port: 0 });
  alpha = (await server.tokens.create({ tenant: 'alpha' })).token;
  bravo = (await server.tokens.create({ tenant: 'bravo' })).token;
});
afterAll(() => listening?.close());

describe('1. revoking the last token does not open the server', () => {
  it('off loopback with its only token revoked, every request is refused, never admin, and the log says so at error level', async () => {
    const rec = recorder();
    // the token is made and revoked by another process (tusk tokens create / revoke)
    const cli = new ApiTokens(() => lone.tusk.pool(), lone.schema);
    const { token, info } = await cli.create({ name: 'the only one' });
    const open = await createServer(lone.another({ logger: rec.log }), { dashboard: false, metrics: false });
    const served = await open.listen({ host: '0.0.0.0', port: 0 });
    const url = `http://127.0.0.1:${served.port}`;
    try {
      const before = await request(url, '/api/whoami', { headers: bearer(token) });
      expect(JSON.parse(before.body)).toMatchObject({ role: 'admin', auth: true });

      expect(await cli.revoke(info.id)).toBe(true);
      // the server reads the live tokens again within 2 s: then it says none is live
      const refused = await eventually(async () => {
        const r = await request(url, '/api/whoami');
        expect(r.status, r.body).not.toBe(200);
        return r.code === 'no_token' ? r : null;
      });
      expect(refused?.status).toBe(503);
      expect(JSON.parse(refused?.body ?? '{}').error.message).toMatch(/none is live.*tusk tokens create/);
      for (const headers of [{}, bearer(token), bearer(ADMIN)]) {
        for (const path of ['/api/whoami', '/api/jobs', '/api/tenants']) {
          const r = await request(url, path, { headers });
          expect([r.status, r.code], path).toEqual([503, 'no_token']);
        }
      }
      const errors = rec.lines.filter((l) => l.level === 'error');
      expect(errors.length).toBeGreaterThanOrEqual(1);
      expect(errors[0]?.msg).toMatch(/no API token is live.*every request is refused/);

      // a token created then is asked for and works: the server stays with tokens
      const fresh = await cli.create({ name: 'new one' });
      expect((await request(url, '/api/whoami', { headers: bearer(fresh.token) })).status).toBe(200);
      expect((await request(url, '/api/whoami')).status).toBe(401);
      await cli.revoke(fresh.info.id);
    } finally {
      await served.close();
    }
  });

  it('a server made with no token at all will not listen off loopback', async () => {
    const none = await createServer(bare.tusk, { dashboard: false, metrics: false });
    await expect(none.listen({ host: '0.0.0.0', port: 0 })).rejects.toThrow(
      /refusing to listen on 0\.0\.0\.0 without a token/,
    );
  });
});

describe('2. one request cannot freeze the server', () => {
  /** `[{},{},...]`, `bytes` long. */
  const objects = (bytes: number) => `[${'{},'.repeat(Math.floor(bytes / 3) - 1)}{}]`.slice(0, bytes);

  it('32 MiB of [{},{},…] streamed: /api/health answers while it is in flight, then it is refused (413) unparsed', async () => {
    const { hostname, port } = new URL(listening.url);
    const events: string[] = [];
    const upload = http.request({
      host: hostname,
      port,
      method: 'POST',
      path: '/api/jobs',
      headers: { ...bearer(alpha), ...json, 'transfer-encoding': 'chunked' },
    });
    upload.on('error', () => {}); // the server may close the connection once it has answered
    const answered = new Promise<Reply>((resolve) => {
      upload.on('response', (res) => {
        events.push('upload answered');
        let body = '';
        res.on('data', (d) => {
          body += d;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body, headers: res.headers, code: errorCode(body) }),
        );
        res.on('error', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers, code: undefined }));
      });
    });
    const body = Buffer.from(objects(32 * MiB));
    const write = (chunk: Buffer) =>
      new Promise<void>((resolve) => {
        if (upload.destroyed || !upload.write(chunk)) upload.once('drain', resolve).once('close', resolve);
        else resolve();
      });

    // the first MiB, under the limit: the server waits for more
    await write(body.subarray(0, MiB));
    const health = await fetch(`${listening.url}/api/health`);
    events.push('health answered');
    expect(health.status).toBe(200);
    expect(events).toEqual(['health answered']);

    // the rest, as long as the server reads it
    for (let at = MiB; at < body.length && events.length === 1 && !upload.destroyed; at += MiB) {
      await write(body.subarray(at, at + MiB));
    }
    upload.end();
    const refused = await answered;
    expect(events).toEqual(['health answered', 'upload answered']);
    expect(refused.status).toBe(413);
    expect(JSON.parse(refused.body).error).toMatchObject({ code: 'too_large', field: 'body' });
    expect(JSON.parse(refused.body).error.message).toMatch(/over the limit of 2162688 bytes/);
    expect((await fetch(`${listening.url}/api/health`)).status).toBe(200);
  });

  it('a Content-Length over the limit is refused before a byte of the body is sent', async () => {
    const { hostname, port } = new URL(listening.url);
    const upload = http.request({
      host: hostname,
      port,
      method: 'POST',
      path: '/api/jobs',
      headers: { ...bearer(alpha), ...json, 'content-length': String(32 * MiB) },
    });
    upload.on('error', () => {});
    upload.flushHeaders();
    const status = await Promise.race([
      new Promise<number>((resolve) => upload.on('response', (res) => resolve(res.statusCode ?? 0))),
      // a deadline, not a wait: the race ends at the answer; past it the test fails with this reason
      sleep(10_000).then(() => 'no answer while the body was held back'),
    ]);
    upload.destroy();
    expect(status).toBe(413);
  });

  it('enqueue many has its own, larger limit; any other body over the single limit is refused unparsed', async () => {
    // 2.5 MiB: over the limit of one job (2 MiB + 64 KiB), under that of many (4 MiB)
    const jobs = Array.from({ length: 25 }, (_, i) => ({ task: 'bulk', payload: { i, pad: 'x'.repeat(110_000) } }));
    const many = JSON.stringify({ jobs });
    expect(many.length).toBeGreaterThan(2.5 * MiB);
    const accepted = await fetch(`${listening.url}/api/jobs`, {
      method: 'POST',
      headers: { ...bearer(alpha), ...json },
      body: many,
    });
    expect(accepted.status).toBe(201);
    expect(((await accepted.json()) as { ids: string[] }).ids.length).toBe(25);

    for (const [path, raw] of [
      ['/api/jobs', JSON.stringify({ task: 'one', payload: jobs })],
      ['/api/jobs', objects(2.5 * MiB)],
      ['/api/jobs/1/ack', JSON.stringify({ token: '1', result: jobs })],
    ] as const) {
      const r = await request(listening.url, path, {
        method: 'POST',
        headers: { ...bearer(ADMIN), ...json },
        body: raw,
      });
      expect([r.status, r.code], path).toEqual([413, 'too_large']);
    }
    const tooMany = `{"jobs":${objects(5 * MiB)}}`;
    const r = await request(listening.url, '/api/jobs', {
      method: 'POST',
      headers: { ...bearer(ADMIN), ...json },
      body: tooMany,
    });
    expect([r.status, r.code]).toEqual([413, 'too_large']);
    expect(JSON.parse(r.body).error.message).toMatch(/4194304 for enqueue many/);
  });
  it('a request whose headers or body never finish arriving is answered 408 and closed at the bound; long polls and event streams outlive it', async () => {
    // Node refuses headers given longer than the whole request: so does createServer, naming it
    await expect(
      createServer(db.tusk, { adminToken: ADMIN, headersTimeoutMs: 2_000, requestTimeoutMs: 1_000 }),
    ).rejects.toThrow(/server options\.headersTimeoutMs: must be at most requestTimeoutMs \(1000\) \(got 2000\)/);
    const slow = await createServer(db.tusk, { adminToken: ADMIN, headersTimeoutMs: 300, requestTimeoutMs: 500 });
    const open = await slow.listen({ port: 0 });
    /** Sends `head` on a raw connection, then nothing: what the server sent until it closed, or that it did not. */
    const sendAndWait = (head: string) =>
      new Promise<string>((resolve) => {
        const socket = net.connect(open.port, '127.0.0.1');
        let got = '';
        socket.on('data', (d) => {
          got += String(d);
        });
        socket.on('error', () => {});
        socket.on('close', () => resolve(got.split('\r\n')[0] ?? ''));
        socket.write(head);
        // a deadline, not a wait: the race ends at the close
        setTimeout(() => {
          resolve('still open');
          socket.destroy();
        }, 10_000).unref();
      });
    try {
      // before, held for requestTimeout (Node's default, 300 s): a tenant with 200 requests a
      // second holds thousands of connections
      const body = `POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${alpha}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{`;
      const headers = `GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1`;
      expect(await Promise.all([sendAndWait(body), sendAndWait(headers)])).toEqual([
        'HTTP/1.1 408 Request Timeout',
        'HTTP/1.1 408 Request Timeout',
      ]);

      // the bounds are on receiving the request, not on the answer: a long poll and an
      // event stream held past them get the job that ends after
      const { id } = await db.tusk.enqueue('t', null, { tenant: 'alpha', queue: 'attack-slow' });
      const stream = await fetch(`${open.url}/api/events`, { headers: bearer(alpha) });
      const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toMatch(/event: ready/);
      const poll = fetch(`${open.url}/api/jobs/${id}?waitMs=10000`, { headers: bearer(alpha) });
      await sleep(1_200);
      await db.tusk.cancel(id);
      const polled = await poll;
      expect([polled.status, ((await polled.json()) as { state: string }).state]).toEqual([200, 'cancelled']);
      let text = '';
      while (!text.includes('event: finished')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
      expect(text).toMatch(new RegExp(`event: finished\ndata: .*"state":"cancelled".*\nid: ${id}\n`));
      await reader.cancel();
    } finally {
      await open.close();
    }
  });
});

describe('3. a server without auth cannot be driven by another site', () => {
  let local: Listening;
  const victim = () => bare.rows<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.jobs`);
  beforeAll(async () => {
    local = await (await createServer(bare.tusk, { metrics: false })).listen({ port: 0 });
  });
  afterAll(() => local?.close());

  it('writes without Content-Type: application/json are refused (415): forms, text/plain, nothing', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', '']) {
      for (const path of ['/api/jobs', '/api/tenants/victim/pause', '/api/jobs/retry']) {
        const r = await request(local.url, path, {
          method: 'POST',
          headers: type ? { 'content-type': type } : {},
          body: '{"task":"planted"}',
        });
        expect([r.status, r.code], `${type} ${path}`).toEqual([415, 'unsupported_media_type']);
      }
    }
    expect(await victim()).toEqual([{ n: 0 }]);
    expect(await bare.rows(`SELECT tenant FROM $schema.tenants WHERE paused`)).toEqual([]);
    const ok = await request(local.url, '/api/jobs', { method: 'POST', headers: json, body: '{"task":"mine"}' });
    expect(ok.status).toBe(201);
    await bare.pool.query(`DELETE FROM "${bare.schema}".jobs`);
  });

  it('a Host that is not a loopback name (DNS rebinding) and an Origin of another site are refused (403)', async () => {
    for (const host of [
      'attacker.example',
      `attacker.example:${local.port}`,
      '10.0.0.5',
      'localhost.attacker.example',
    ]) {
      for (const path of ['/api/whoami', '/', '/api/jobs?state=dead', '/metrics', '/nothing']) {
        const r = await request(local.url, path, { headers: { host } });
        expect([r.status, r.code], `${host} ${path}`).toEqual([403, 'forbidden_host']);
      }
    }
    for (const origin of ['http://attacker.example', 'https://127.0.0.1.attacker.example', 'null']) {
      const r = await request(local.url, '/api/jobs', {
        method: 'POST',
        headers: { ...json, origin },
        body: '{"task":"planted"}',
      });
      expect([r.status, r.code], origin).toEqual([403, 'forbidden_origin']);
    }
    expect(await victim()).toEqual([{ n: 0 }]);
    for (const host of ['localhost', `127.0.0.1:${local.port}`, `[::1]:${local.port}`, 'tusk.localhost']) {
      const r = await request(local.url, '/api/whoami', {
        headers: { host, origin: `http://localhost:${local.port}` },
      });
      expect(r.status, host).toBe(200);
    }
  });

  describe('in a browser', () => {
    needs(chromiumPresent());
    it('in Chromium, a page of another site plants nothing, pauses nothing, retries nothing', async () => {
      const executablePath = CHROMIUM;
      await bare.tusk.tenants.set('victim', { slots: 1 });
      const { id: dead } = await bare.tusk.enqueue('doomed', null, { tenant: 'victim', maxAttempts: 1 });
      const [leased] = await bare.tusk.fetch({ tenant: 'victim' });
      if (!leased) throw new Error('nothing leased');
      await bare.tusk.nack(leased);
      const target = `http://127.0.0.1:${local.port}`;
      // another site's page, served from here under the name attacker.example
      const site = http.createServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>a page</title>');
      });
      await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
      const sitePort = (site.address() as { port: number }).port;
      const browser = await chromium.launch({
        executablePath,
        args: ['--no-sandbox', '--host-resolver-rules=MAP attacker.example 127.0.0.1'],
      });
      try {
        const page = await browser.newPage();
        await page.goto(`http://attacker.example:${sitePort}/`);
        const outcomes = await page.evaluate(async (target) => {
          const send = (path: string, init: RequestInit) =>
            fetch(`${target}${path}`, init).then(
              () => 'sent',
              () => 'blocked',
            );
          return {
            plant: await send('/api/jobs', { method: 'POST', mode: 'no-cors', body: '{"task":"planted"}' }),
            pause: await send('/api/tenants/victim/pause', { method: 'POST', mode: 'no-cors' }),
            retry: await send('/api/jobs/retry', { method: 'POST', mode: 'no-cors', body: '{}' }),
            json: await send('/api/jobs', {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: '{"task":"planted"}',
            }),
          };
        }, target);
        // the requests reached the server (else this test would prove nothing)
        expect(outcomes).toMatchObject({ plant: 'sent', pause: 'sent', retry: 'sent' });

        // DNS rebinding: the attacker's name, now pointing here, loads the server itself
        const rebound = await page.goto(`http://attacker.example:${local.port}/api/whoami`);
        expect(rebound?.status()).toBe(403);
        expect((await page.goto(`http://attacker.example:${local.port}/`))?.status()).toBe(403);
      } finally {
        await browser.close();
        await new Promise((resolve) => site.close(resolve));
      }
      expect(await bare.rows(`SELECT id FROM $schema.jobs WHERE task = 'planted'`)).toEqual([]);
      expect((await bare.tusk.tenants.get('victim'))?.paused).toBe(false);
      expect((await bare.tusk.getJob(dead))?.state).toBe('dead');
    });
  });
});

describe('4. a mounted app is never silently open', () => {
  it('with no auth configured, createServer().app refuses to be built, naming the option', async () => {
    const none = await createServer(bare.tusk, { adminToken: process.env.TUSK_TEST_UNSET_VARIABLE });
    expect(() => none.app).toThrow(TuskError);
    expect(() => none.app).toThrow(/no auth is configured.*auth: 'none'/);
    // the tokens are still there to make one
    expect(await none.tokens.list()).toEqual([]);
  });

  it("auth: 'none' must be said, and answers loopback Host names only", async () => {
    const open = await createServer(bare.tusk, { auth: 'none', dashboard: false, metrics: false });
    const app = new Hono().route('/tusk', open.app);
    const publicly = await app.request('http://tusk.example.com/tusk/api/whoami');
    expect(publicly.status).toBe(403);
    const locally = await app.request('http://localhost/tusk/api/whoami');
    expect(await locally.json()).toEqual({ role: 'admin', tenant: null, scopes: ['admin'], auth: false });
    await expect(open.listen({ host: '0.0.0.0', port: 0 })).rejects.toThrow(/auth: 'none'/);
    await expect(createServer(bare.tusk, { auth: 'none', adminToken: ADMIN })).rejects.toThrow(/say which/);
  });

  it("auth: 'token' with no token yet refuses every request (503) until one is made", async () => {
    const strict = await createServer(bare.tusk, { auth: 'token', dashboard: false, metrics: false });
    const app = new Hono().route('/tusk', strict.app);
    const r = await app.request('http://tusk.example.com/tusk/api/whoami');
    expect(r.status).toBe(503);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('no_token');
  });

  it('an admin token under 32 characters is refused off loopback and when mounted', async () => {
    const weak = await createServer(bare.tusk, { adminToken: 'a', dashboard: false, metrics: false });
    await expect(weak.listen({ host: '0.0.0.0', port: 0 })).rejects.toThrow(/is 1 characters.*at least 32/);
    expect(() => weak.app).toThrow(/in a mounted app it must be at least 32/);
    const onLoopback = await weak.listen({ port: 0 });
    expect((await request(onLoopback.url, '/api/whoami', { headers: bearer('a') })).status).toBe(200);
    await onLoopback.close();
  });
});

describe('5. tenants cannot choose how large /metrics grows', () => {
  it('10 000 queue names of one tenant: at most 500 label sets a metric, the rest under _other, dropped when stale', async () => {
    const watched = await createServer(db.another(), {
      adminToken: ADMIN,
      dashboard: false,
      metrics: { lagMs: 0, staleAfterMs: 1_000 },
    });
    const app = watched.app;
    const scrape = async () => {
      const r = await app.request('/metrics', { headers: bearer(ADMIN) });
      expect(r.status).toBe(200);
      return r.text();
    };
    const series = (text: string, metric: string) =>
      text.split('\n').filter((l) => l.startsWith(`${metric}{`) || l.startsWith(`${metric} `));
    const baseline = (await scrape()).split('\n').length;

    const jobs = Array.from({ length: 10_000 }, (_, i) => ({ task: 'flood', queue: `flood-${i}` }));
    const flood = await app.request('/api/jobs', {
      method: 'POST',
      headers: { ...bearer(alpha), ...json },
      body: JSON.stringify({ jobs }),
    });
    expect(flood.status).toBe(201);

    const text = await scrape();
    const labelSets = (metric: string) =>
      new Set(series(text, metric).map((l) => l.replace(/,?state="\w+"/, '').replace(/ \S+$/, ''))).size;
    const metrics = [
      'tusk_jobs',
      'tusk_oldest_waiting_seconds',
      'tusk_jobs_claimed_total',
      'tusk_jobs_failed_total',
      'tusk_jobs_finished_total',
    ];
    for (const metric of metrics) expect(labelSets(metric), metric).toBeLessThanOrEqual(501);
    // a (queue, tenant) pair has 11 series: 4 states, the oldest wait, 2 counters, 4 final states
    expect(text.split('\n').length).toBeLessThanOrEqual(baseline + 11 * 501);
    // nothing is lost: the jobs over the cap are counted under _other
    const available = series(text, 'tusk_jobs')
      .filter((l) => l.includes('state="available"'))
      .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    const [{ n } = { n: -1 }] = await db.rows<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.jobs WHERE state = 'available'`,
    );
    expect(available).toBe(n);
    const other = series(text, 'tusk_jobs').find((l) =>
      l.startsWith('tusk_jobs{queue="_other",tenant="_other",state="available"}'),
    );
    expect(Number(other?.split(' ')[1])).toBeGreaterThanOrEqual(10_000 - 500);

    // the jobs gone, their series go after staleAfterMs
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE task = 'flood'`);
    await eventually(async () => !/flood-|_other/.test(await scrape()), 20_000, 250);
    expect((await scrape()).split('\n').length).toBeLessThanOrEqual(baseline);
    await watched.close();
  });
});

describe("6. one tenant's heavy reads do not slow the others", () => {
  it('a token over its request rate gets 429 with Retry-After; other tokens are served', async () => {
    const limited = await createServer(db.tusk, {
      adminToken: ADMIN,
      dashboard: false,
      metrics: false,
      rateLimit: { perSecond: 0.01, burst: 5 },
    });
    const app = limited.app;
    const replies: Response[] = [];
    for (let i = 0; i < 8; i++) replies.push(await app.request('/api/jobs?task=nope', { headers: bearer(alpha) }));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    const last = replies[7] as Response;
    expect(Number(last.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(((await last.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
    expect((await app.request('/api/jobs?task=nope', { headers: bearer(bravo) })).status).toBe(200);
    expect((await app.request('/api/health')).status).toBe(200);
    await limited.close();
  });

  it('past 64 long polls held at once a token is refused (429 too_many_waits); other tokens poll on, and the slots come back as the waits end', async () => {
    const app = server.app;
    const { id } = await db.tusk.enqueue('t', null, { tenant: 'alpha', queue: 'attack-waits' });
    const [lease] = await db.tusk.fetch({ queue: 'attack-waits' });
    const poll = (token: string, jobId: string, waitMs: number) =>
      app.request(`/api/jobs/${jobId}?waitMs=${waitMs}`, { headers: bearer(token) });
    // before, a token could hold long polls without end, each a timer and a read at its end:
    // of 70 at once, 64 are held and 6 refused, whatever the order they come in
    const polls = Array.from({ length: 70 }, () => poll(alpha, id, 60_000));
    const answered: Response[] = [];
    for (const p of polls) void Promise.resolve(p).then((r) => answered.push(r));
    await eventually(() => answered.length >= 6, 10_000);
    await sleep(200);
    expect(answered).toHaveLength(6);
    const codes = await Promise.all(
      answered.map(async (r) => `${r.status} ${((await r.json()) as { error: { code: string } }).error.code}`),
    );
    expect(codes).toEqual(codes.map(() => '429 too_many_waits'));
    // when to ask again, as the rate limit's 429 says (before, no Retry-After)
    expect(answered.map((r) => r.headers.get('retry-after'))).toEqual(answered.map(() => '1'));
    const other = await db.tusk.enqueue('t', null, { tenant: 'bravo', queue: 'attack-waits-b' });
    const bravoPoll = await poll(bravo, other.id, 50);
    expect(bravoPoll.status).toBe(200);
    // the admin is not counted: an app that mounts the API behind its own auth serves all
    // its users with it (70 at once: 64 held and 6 refused before)
    const admin = await Promise.all(Array.from({ length: 70 }, () => poll(ADMIN, other.id, 300)));
    expect(admin.map((r) => r.status)).toEqual(admin.map(() => 200));
    // the job ends: every held poll answers with it, and the token may poll again
    await db.tusk.ack(lease as never, 'done');
    const answers = (await Promise.all(polls)).filter((r) => !answered.slice(0, 6).includes(r));
    expect(answers.map((r) => r.status)).toEqual(Array.from({ length: 64 }, () => 200));
    expect(((await (answers[0] as Response).json()) as { state: string }).state).toBe('succeeded');
    const next = await db.tusk.enqueue('t', null, { tenant: 'alpha', queue: 'attack-waits-c' });
    expect((await poll(alpha, next.id, 50)).status).toBe(200);
    await db.tusk.cancel(other.id);
    await db.tusk.cancel(next.id);
  });

  it("a tenant's pile of slow lists waits on connections of its own: another tenant's fetch goes on", async () => {
    const fair = await createServer(db.tusk, {
      adminToken: ADMIN,
      dashboard: false,
      metrics: false,
      readTimeoutMs: 60_000,
      connections: { reads: 2, leases: 2 },
    });
    const served = await fair.listen({ port: 0 });
    await db.tusk.enqueue('bravo-work', null, { tenant: 'bravo', queue: 'fair' });
    // the lists read the history; this holds it as a long scan would
    const locker = await db.pool.connect();
    const order: string[] = [];
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".job_history IN ACCESS EXCLUSIVE MODE`);
      const lists = Array.from({ length: 12 }, () =>
        request(served.url, '/api/jobs?task=nope', { headers: bearer(alpha) }).then((r) => {
          order.push('list');
          return r.status;
        }),
      );
      await eventually(async () => {
        const [{ n } = { n: -1 }] = await db.rows<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'tusk http reads' AND wait_event_type = 'Lock'`,
        );
        return n === 2;
      });
      const fetched = await request(served.url, '/api/fetch', {
        method: 'POST',
        headers: { ...bearer(bravo), ...json },
        body: '{"queue":"fair"}',
      });
      order.push('fetch');
      expect(fetched.status, fetched.body).toBe(200);
      expect(JSON.parse(fetched.body).jobs.length).toBe(1);
      const enqueued = await request(served.url, '/api/jobs', {
        method: 'POST',
        headers: { ...bearer(bravo), ...json },
        body: '{"task":"more","queue":"fair"}',
      });
      order.push('enqueue');
      expect(enqueued.status).toBe(201);
      expect(order).toEqual(['fetch', 'enqueue']);
      await locker.query('COMMIT');
      expect(await Promise.all(lists)).toEqual(Array(12).fill(200));
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      await served.close();
    }
  });

  it('lists and searches end at the statement timeout (503), answered and logged at warn', async () => {
    const rec = recorder();
    const hasty = await createServer(db.another({ logger: rec.log }), {
      adminToken: ADMIN,
      dashboard: false,
      metrics: false,
      readTimeoutMs: 200,
    });
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".job_history IN ACCESS EXCLUSIVE MODE`);
      for (const [path, token] of [
        ['/api/jobs?task=nope', alpha],
        ['/api/stats', ADMIN],
      ] as const) {
        const r = await hasty.app.request(path, { headers: bearer(token) });
        expect(r.status, path).toBe(503);
        expect(((await r.json()) as { error: { code: string } }).error.code).toBe('timeout');
      }
      await locker.query('ROLLBACK');
      // a tenant's own summary counts its jobs in a scan of every tenant's: a read of its own
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".jobs IN ACCESS EXCLUSIVE MODE`);
      const r = await hasty.app.request('/api/tenants/alpha', { headers: bearer(alpha) });
      expect(r.status).toBe(503);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('timeout');
      // so does a retry of every failed job of a tenant: a search first
      const retry = await hasty.app.request('/api/jobs/retry', {
        method: 'POST',
        headers: { ...bearer(alpha), 'content-type': 'application/json' },
        body: JSON.stringify({ state: 'failed' }),
      });
      expect(retry.status).toBe(503);
      expect(((await retry.json()) as { error: { code: string } }).error.code).toBe('timeout');
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
      await hasty.close();
    }
    expect(rec.lines.filter((l) => l.level === 'error')).toEqual([]);
    expect(rec.lines.filter((l) => l.level === 'warn').length).toBe(4);
  });

  it('a flood of made-up tokens costs the database one query, not one each', async () => {
    const guarded = await createServer(db.another(), { adminToken: ADMIN, dashboard: false, metrics: false });
    const app = guarded.app;
    // another process makes a token: it works at once
    const { token } = await new ApiTokens(() => db.tusk.pool(), db.schema).create({ tenant: 'charlie' });
    expect((await app.request('/api/whoami', { headers: bearer(token) })).status).toBe(200);

    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".api_tokens IN ACCESS EXCLUSIVE MODE`);
      const made = Array.from({ length: 50 }, () => `tusk_${randomBytes(32).toString('base64url')}`);
      const verify = vi.spyOn(guarded.tokens, 'verify');
      const replies = made.map(async (t) => (await app.request('/api/jobs', { headers: bearer(t) })).status);
      const waiting = async () =>
        (
          await db.rows<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%token%' AND pid <> pg_backend_pid()`,
          )
        )[0]?.n;
      await eventually(async () => (await waiting()) === 1);
      // every request has asked for its token: a lookup of its own would have started by now
      await eventually(() => verify.mock.calls.length === made.length);
      expect(await waiting()).toBe(1);
      await locker.query('COMMIT');
      expect(await Promise.all(replies)).toEqual(Array(50).fill(401));
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      await guarded.close();
    }
  });
  it('a lookup answered after this process revoked the token is not kept: the next request is refused', async () => {
    // the token's lookup is read while live, and its answer held until the revocation is done
    let releaseLookup!: () => void;
    const lookupHeld = new Promise<void>((resolve) => {
      releaseLookup = resolve;
    });
    let lookups = 0;
    const query = db.pool.query.bind(db.pool) as (...args: unknown[]) => Promise<unknown>;
    const held = Object.create(db.pool) as typeof db.pool;
    held.query = (async (...args: unknown[]) => {
      const text = String(args[0]);
      const answer = await query(...args);
      if (text.includes('find_token(') && ++lookups === 1) await lookupHeld;
      return answer;
    }) as typeof db.pool.query;
    const tokens = new ApiTokens(async () => held, db.schema);
    const { token, info } = await tokens.create({ tenant: 'echo' });
    const first = tokens.verify(token);
    await eventually(() => lookups === 1);
    expect(await tokens.revoke(info.id)).toBe(true);
    releaseLookup();
    expect((await first)?.tenant).toBe('echo'); // live when it was read
    // before, that answer was kept for a second after the revocation
    expect(await tokens.verify(token)).toBeNull();
  });

  it("a live token's flood is answered without a lookup each (429s included); its revocation counts within a second", async () => {
    const guarded = await createServer(db.another(), {
      adminToken: ADMIN,
      dashboard: false,
      metrics: false,
      rateLimit: { perSecond: 10, burst: 20 },
    });
    const app = guarded.app;
    const cli = new ApiTokens(() => db.tusk.pool(), db.schema);
    const { token, info } = await cli.create({ tenant: 'delta' });
    expect((await app.request('/api/whoami', { headers: bearer(token) })).status).toBe(200);
    const locker = await db.pool.connect();
    try {
      // a lookup of the token now waits
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".api_tokens IN ACCESS EXCLUSIVE MODE`);
      let answered = 0;
      const replies = Array.from({ length: 60 }, async () => {
        const status = (await app.request('/api/whoami', { headers: bearer(token) })).status;
        answered++;
        return status;
      });
      // before, each request looked its token up (and waited here), those refused by the rate limit too
      await eventually(() => answered === 60, 5000, 10, 'the answers, with the token table locked');
      const statuses = await Promise.all(replies);
      expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(0);
      expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
      await locker.query('COMMIT');
      // revoked by another process: refused within about a second
      await cli.revoke(info.id);
      await eventually(async () => (await app.request('/api/whoami', { headers: bearer(token) })).status === 401, 3000);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      await guarded.close();
    }
  });
});

describe('8. scopes, tenant checks, cursors, aborted uploads, caching', () => {
  it('token scopes on top of the tenant: enqueue+read cannot lease, lease cannot enqueue or read', async () => {
    const producer = (await server.tokens.create({ tenant: 'alpha', scopes: 'enqueue+read' })).token;
    const worker = (await server.tokens.create({ tenant: 'alpha', scopes: ['lease'] })).token;
    const scraper = (await server.tokens.create({ scopes: 'metrics' })).token;
    const call = (token: string, method: string, path: string, body?: unknown) =>
      request(listening.url, path, {
        method,
        headers: { ...bearer(token), ...(method === 'GET' ? {} : json) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });

    const posted = await call(producer, 'POST', '/api/jobs', { task: 'scoped', queue: 'scoped' });
    expect(posted.status).toBe(201);
    const { id } = JSON.parse(posted.body) as { id: string };
    expect((await call(producer, 'GET', `/api/jobs/${id}`)).status).toBe(200);
    for (const [method, path, body] of [
      ['POST', '/api/fetch', { queue: 'scoped' }],
      ['POST', `/api/jobs/${id}/ack`, { token: '1' }],
      ['POST', `/api/jobs/${id}/cancel`, undefined],
      ['POST', '/api/jobs/retry', {}],
      ['GET', '/api/tenants', undefined],
    ] as const) {
      const r = await call(producer, method, path, body);
      expect([r.status, r.code], path).toEqual([403, 'forbidden']);
    }
    expect(JSON.parse((await call(producer, 'POST', '/api/fetch', {})).body).error.message).toMatch(
      /the scope lease \(this one has enqueue\+read\)/,
    );

    const leased = await call(worker, 'POST', '/api/fetch', { queue: 'scoped' });
    const leasedJobs = JSON.parse(leased.body).jobs as Array<{ id: string; token: string }>;
    expect(leasedJobs.map((j) => j.id)).toEqual([id]);
    const token = leasedJobs[0]?.token;
    expect((await call(worker, 'POST', `/api/jobs/${id}/ack`, { token, result: 1 })).status).toBe(200);
    for (const [method, path] of [
      ['POST', '/api/jobs'],
      ['GET', `/api/jobs/${id}`],
      ['GET', '/api/jobs'],
    ] as const) {
      const r = await call(worker, method, path, method === 'POST' ? { task: 'x' } : undefined);
      expect([r.status, r.code], path).toEqual([403, 'forbidden']);
    }

    expect((await call(scraper, 'GET', '/metrics')).status).toBe(200);
    expect((await call(scraper, 'GET', '/api/stats')).status).toBe(403);
    expect(JSON.parse((await call(scraper, 'GET', '/api/whoami')).body)).toEqual({
      role: 'scoped',
      tenant: null,
      scopes: ['metrics'],
      auth: true,
    });
    await expect(server.tokens.create({ tenant: 'alpha', scopes: 'admin' })).rejects.toThrow(
      /options\.scopes: admin reaches every tenant/,
    );
    await expect(server.tokens.create({ scopes: 'enqueue+root' })).rejects.toThrow(/"root" is not a scope/);
    // the table refuses them too, whoever writes to it
    await expect(
      db.pool.query(
        `INSERT INTO "${db.schema}".api_tokens (tenant, scopes, token_hash, prefix) VALUES ('alpha', '{admin}', '\\x00', 'x')`,
      ),
    ).rejects.toThrow(/api_tokens_scopes_of_tenant/);
  });

  it("another tenant's job is filtered out by the query itself: the same 404 as a missing id", async () => {
    const { id } = await db.tusk.enqueue('secret', { big: 'x'.repeat(100_000) }, { tenant: 'bravo' });
    expect(await selectTenantJob(db.pool, db.schema, id, 'alpha')).toBeNull();
    expect((await selectTenantJob(db.pool, db.schema, id, 'bravo'))?.id).toBe(id);
    const hidden = await request(listening.url, `/api/jobs/${id}`, { headers: bearer(alpha) });
    const missing = await request(listening.url, '/api/jobs/999999999', { headers: bearer(alpha) });
    expect([hidden.status, hidden.body]).toEqual([missing.status, missing.body]);
    expect(hidden.status).toBe(404);
  });

  it("a tenant's dependencies are checked on the searches' connections, each id once: made-up ids hold no one else up", async () => {
    const { id: own } = await db.tusk.enqueue('dep', null, { tenant: 'alpha', queue: 'deps-check' });
    const send = (dependsOn: string[]) =>
      request(listening.url, '/api/jobs', {
        method: 'POST',
        headers: { ...bearer(alpha), ...json },
        body: JSON.stringify({ task: 'uses', queue: 'deps-check', dependsOn }),
      });
    // one id 5 000 times: accepted, its check made once
    expect((await send(Array(5000).fill(own))).status).toBe(201);
    const locker = await db.pool.connect();
    try {
      // the history's ids wait: a check of ids that are no job (not in jobs) is held
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".job_history IN ACCESS EXCLUSIVE MODE`);
      const made = Array.from({ length: 3000 }, (_, i) => String(900_000_000 + i));
      const refused = send(made);
      const checking = async () =>
        (
          await db.rows<{ name: string }>(
            `SELECT application_name AS name FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE '%job_history%' AND pid <> pg_backend_pid()`,
          )
        )[0]?.name;
      await eventually(checking);
      // before, on the pool of every tenant's enqueues and reads by id
      expect(await checking()).toBe('tusk http reads');
      await locker.query('COMMIT');
      const reply = await refused;
      expect([reply.status, reply.code]).toEqual([400, 'invalid']);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'deps-check'`);
  });

  it('a cursor of digits past a bigint is a 400 naming it, not a 500 with a stack in the log', async () => {
    const before = main.lines.length;
    for (const cursor of ['9999999999999999999', '9223372036854775808']) {
      const r = await request(listening.url, `/api/jobs?cursor=${cursor}`, { headers: bearer(alpha) });
      expect(r.status).toBe(400);
      expect(JSON.parse(r.body).error).toMatchObject({ field: 'query.cursor' });
    }
    const top = await request(listening.url, '/api/jobs?cursor=9223372036854775807', { headers: bearer(alpha) });
    expect(top.status).toBe(200);
    expect(main.lines.slice(before).filter((l) => l.level === 'error')).toEqual([]);
  });

  it('an upload the client cuts off is logged at debug level, not error', async () => {
    const before = main.lines.length;
    // a token of its own: its first use is noted in the database, which shows the server
    // has taken the request in (and is reading its body) before the client cuts it off
    const { token, info } = await server.tokens.create({ tenant: 'alpha' });
    const { hostname, port } = new URL(listening.url);
    const upload = http.request({
      host: hostname,
      port,
      method: 'POST',
      path: '/api/jobs',
      headers: { ...bearer(token), ...json, 'content-length': '100000' },
    });
    upload.on('error', () => {});
    upload.write('{"task":"cut","payload":"');
    await eventually(
      async () =>
        (await db.rows('SELECT 1 FROM $schema.api_tokens WHERE id = $1 AND last_used_at IS NOT NULL', [info.id]))
          .length > 0,
    );
    upload.destroy();
    await eventually(() =>
      main.lines.slice(before).some((l) => l.level === 'debug' && /ended before it was read whole/.test(l.msg)),
    );
    expect(main.lines.slice(before).filter((l) => l.level === 'error')).toEqual([]);
  });

  it('API answers, errors included, are never cached', async () => {
    for (const [path, token] of [
      ['/api/jobs', alpha],
      ['/api/jobs/999999999', alpha],
      ['/api/whoami', 'tusk_wrong'],
      ['/api/health', null],
      ['/metrics', ADMIN],
    ] as const) {
      const r = await request(listening.url, path, { headers: token ? bearer(token) : {} });
      expect(r.headers['cache-control'], path).toBe('no-store');
    }
  });
});

describe('7. a tenant flooding concurrency keys does not slow the others', () => {
  /** Index scans on jobs (every index) made by `sql` in one transaction: its work, not its time. */
  async function indexScans(sql: string, values: unknown[] = []): Promise<{ scans: number; rows: unknown[] }> {
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      const { rows } = await c.query(sql.replaceAll('$schema', `"${db.schema}"`), values);
      const { rows: stats } = await c.query<{ n: string }>(
        `SELECT coalesce(sum(pg_stat_get_xact_numscans(i.indexrelid)), 0) AS n FROM pg_index i
         WHERE i.indrelid = $1::regclass`,
        [`"${db.schema}".jobs`],
      );
      await c.query('ROLLBACK');
      return { scans: Number(stats[0]?.n), rows };
    } finally {
      c.release();
    }
  }

  it('5 000 distinct keys of one tenant: another tenant’s fetch, and a claim for everyone, look at a bounded number of lanes', async () => {
    const flood = Array.from({ length: 5000 }, (_, k) => ({
      task: 'flood',
      tenant: 'flooder',
      queue: 'lanes',
      concurrencyKey: `k${String(k).padStart(5, '0')}`,
    }));
    // over HTTP, as the attack came
    for (let i = 0; i < flood.length; i += 2500) {
      const r = await request(listening.url, '/api/jobs', {
        method: 'POST',
        headers: { ...bearer(ADMIN), ...json },
        body: JSON.stringify({ jobs: flood.slice(i, i + 2500) }),
      });
      expect(r.status, r.body).toBe(201);
    }
    const { id: victim } = await db.tusk.enqueue('work', null, { tenant: 'victim', queue: 'lanes' });

    // the victim's own fetch: its pair only, whatever the flooder has waiting
    const own = await indexScans(`SELECT id::text FROM $schema.fetch_jobs(1, 30000, 'lanes', 'victim')`);
    expect(own.rows).toEqual([{ id: victim }]);
    expect(own.scans).toBeLessThan(20);

    // a claim for every tenant, the flooder without a per-key limit: keys do not matter to it
    const anyone = await indexScans(`SELECT id FROM $schema.fetch_jobs(10, 30000, 'lanes')`);
    expect(anyone.rows).toHaveLength(10);
    expect(anyone.scans).toBeLessThan(50);

    // with a per-key limit the flooder's keys are lanes: a claim reads as many as it can
    // take (its first jobs' keys), not the window of key_lanes (1 000) it read before
    await db.tusk.tenants.set('flooder', { perKey: 1 });
    const keyed = await indexScans(
      `SELECT concurrency_key FROM $schema.fetch_jobs(100, 30000, 'lanes', 'flooder') ORDER BY 1`,
    );
    expect(keyed.rows).toHaveLength(100); // one job of each of the first 100 keys
    expect(keyed.rows.at(-1)).toEqual({ concurrency_key: 'k00099' });
    // a few index scans a lane (its running jobs, its first job): 100 lanes, not 1 000
    expect(keyed.scans).toBeLessThan(400);
  });
});
