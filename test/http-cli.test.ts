import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI, cliEnv, exited, tusk } from './cli.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const env = () => ({ ...cliEnv(db.url, db.schema), TUSK_ADMIN_TOKEN: '' });
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const child of children) child.kill('SIGTERM');
  await Promise.all(children.map(exited));
});

/** Starts `tusk serve ...args`; resolves with the process and its URL once it listens. */
function serve(...args: string[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', ...args], { env: env(), stdio: 'pipe' });
  children.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (d) => {
      out += d;
      const url = /serving on (http:\/\/\S+)/.exec(out)?.[1];
      if (url) resolve({ child, url });
    });
    child.once('exit', (code) => reject(new Error(`tusk serve exited with ${code}: ${out}`)));
  });
}

const get = async (url: string, token?: string) => {
  const response = await fetch(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  return { status: response.status, body: await response.text() };
};

describe('tusk serve and tusk tokens', () => {
  it('without a token: loopback only, no auth; then tokens make it ask for one; submit, poll, result over HTTP', async () => {
    const refused = await tusk(env(), 'serve', '--port', '0', '--host', '0.0.0.0');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/refusing to listen on 0\.0\.0\.0 without a token/);

    const { child, url } = await serve('--metrics-lag-ms', '0');
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(JSON.parse((await get(`${url}/api/whoami`)).body)).toEqual({
      role: 'admin',
      tenant: null,
      scopes: ['admin'],
      auth: false,
    });
    const page = await get(`${url}/`);
    expect(page.status).toBe(200);
    expect(page.body).toContain('assets/app.js');
    expect((await get(`${url}/assets/uPlot.iife.min.js`)).status).toBe(200);
    expect((await get(`${url}/assets/nope.js`)).status).toBe(404);

    const created = await tusk(env(), 'tokens', 'create', '--tenant', 'acme', '--name', 'web app');
    expect(created.code).toBe(0);
    const acme = created.stdout.trim();
    expect(acme).toMatch(/^tusk_[\w-]{43}$/);
    expect(created.stderr).toMatch(/for tenant acme \(enqueue\+read\+manage\+lease\): shown once/);
    const admin = (await tusk(env(), 'tokens', 'create')).stdout.trim();
    const list = await tusk(env(), 'tokens', 'list');
    expect(list.stdout).toMatch(/1\s+web app\s+acme\s+enqueue\+read\+manage\+lease\s+tusk_\S{6}…/);
    expect(list.stdout).toMatch(/2\s+-\s+every\s+admin\s+tusk_/);
    expect(list.stdout).not.toContain(acme);

    // the running server notices the new tokens within its cache time (2 s)
    await eventually(async () => (await get(`${url}/api/whoami`)).status === 401, 5_000, 100);

    // the web app submits a request, gets an id, polls until the result is ready
    const submitted = await fetch(`${url}/api/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${acme}`, 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'run_query', payload: { sql: 'select 42' }, dedupe: true }),
    });
    expect(submitted.status).toBe(201);
    const { id } = (await submitted.json()) as { id: string };
    const worker = db.worker({ tasks: { run_query: async () => ({ rows: [[42]] }) } });
    await worker.start();
    const done = await eventually(async () => {
      const job = JSON.parse((await get(`${url}/api/jobs/${id}`, acme)).body) as { state: string; result: unknown };
      return job.state === 'succeeded' ? job : null;
    });
    expect(done).toMatchObject({ tenant: 'acme', result: { rows: [[42]] } });
    await worker.stop();

    // /metrics in the server process counts what this process's worker did
    const metrics = await eventually(
      async () => {
        const text = (await get(`${url}/metrics`, admin)).body;
        return /tusk_jobs_finished_total\{queue="default",tenant="acme",state="succeeded"\} 1/.test(text) ? text : null;
      },
      10_000,
      200,
    );
    expect(metrics).toMatch(/tusk_jobs_claimed_total\{queue="default",tenant="acme"\} 1/);
    expect((await get(`${url}/metrics`, acme)).status).toBe(403);

    // scopes: a token that may enqueue and read, not lease
    const producer = await tusk(env(), 'tokens', 'create', '--tenant', 'acme', '--scope', 'enqueue+read');
    expect(producer.stderr).toMatch(/for tenant acme \(enqueue\+read\): shown once/);
    const leaseWith = (token: string) =>
      fetch(`${url}/api/fetch`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      });
    expect((await leaseWith(producer.stdout.trim())).status).toBe(403);
    expect((await leaseWith(acme)).status).toBe(200);
    expect((await get(`${url}/api/jobs/${id}`, producer.stdout.trim())).status).toBe(200);
    const bad = await tusk(env(), 'tokens', 'create', '--tenant', 'acme', '--scope', 'admin');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/--scope: admin reaches every tenant/);
    expect((await tusk(env(), 'tokens', 'list')).stdout).toMatch(/3\s+-\s+acme\s+enqueue\+read\s+tusk_/);

    const revoked = await tusk(env(), 'tokens', 'revoke', '1');
    expect(revoked.stdout).toMatch(/token 1 revoked/);
    expect((await get(`${url}/api/jobs/${id}`, acme)).status).toBe(401);
    expect((await tusk(env(), 'tokens', 'revoke', '1')).code).toBe(1);

    child.kill('SIGTERM');
    expect(await exited(child)).toBe(0);
  });
});
