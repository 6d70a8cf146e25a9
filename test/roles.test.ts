// Least-privilege roles: each may do its job and nothing else.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, Tusk } from '../src/index.js';
import { tusk as cli, cliEnv } from './cli.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const prefix = `tr_${randomBytes(3).toString('hex')}`;
const logins = { producer: `${prefix}_p_login`, worker: `${prefix}_w_login`, api: `${prefix}_a_login` };
const opened: Array<{ end(): Promise<void> } | Tusk> = [];
// a password too: the embedded server asks for one (SCRAM), a trust server ignores it
const PASSWORD = randomBytes(12).toString('hex');

/** A connection string logging in as `user`. */
function as(user: string): string {
  const url = new URL(db.url);
  url.username = user;
  url.password = PASSWORD;
  return url.toString();
}

async function client(user: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: as(user) });
  await c.connect();
  opened.push(c);
  return c;
}

const denied = (p: Promise<unknown>) => expect(p).rejects.toThrow(/permission denied/);

beforeAll(async () => {
  const run = await cli(cliEnv(db.url, db.schema), 'roles', 'create', '--prefix', prefix);
  expect(run.code, run.stderr).toBe(0);
  expect(run.stdout).toContain(`${prefix}_worker`);
  // idempotent: a second run changes nothing and does not fail
  expect((await cli(cliEnv(db.url, db.schema), 'roles', 'create', '--prefix', prefix)).code).toBe(0);
  for (const [kind, login] of Object.entries(logins)) {
    await db.pool.query(`CREATE ROLE "${login}" LOGIN PASSWORD '${PASSWORD}' IN ROLE "${prefix}_${kind}"`);
  }
});

afterAll(async () => {
  for (const c of opened.splice(0)) await (c instanceof Tusk ? c.close() : c.end()).catch(() => {});
  for (const role of [...Object.values(logins), `${prefix}_producer`, `${prefix}_worker`, `${prefix}_api`]) {
    await db.pool.query(`DROP OWNED BY "${role}"`).catch(() => {});
    await db.pool.query(`DROP ROLE IF EXISTS "${role}"`);
  }
});

describe('least-privilege roles', () => {
  it('a worker in another language leases, extends, acks and nacks, and reads or writes no table', async () => {
    const { ids } = await db.tusk.enqueueMany([
      { task: 'w', queue: 'roles-w' },
      { task: 'w', queue: 'roles-w' },
    ]);
    const c = await client(logins.worker);
    const s = `"${db.schema}"`;
    const { rows } = await c.query(`SELECT id::text, lease_token FROM ${s}.fetch_jobs(2, 30000, 'roles-w')`);
    expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort());
    const [a, b] = rows as Array<{ id: string; lease_token: string }>;
    expect(
      (await c.query(`SELECT ${s}.extend_lease($1, $2, 60000) AS u`, [a?.id, a?.lease_token])).rows[0].u,
    ).not.toBeNull();
    const told = await c.query(`SELECT * FROM ${s}.working($1, $2, 60000)`, [a?.id, a?.lease_token]);
    expect(told.rows[0]).toMatchObject({ cancel_requested: false });
    expect(told.rows[0].lease_until).not.toBeNull();
    expect((await c.query(`SELECT ${s}.ack_job($1, $2, '1') AS ok`, [a?.id, a?.lease_token])).rows[0].ok).toBe(true);
    expect((await c.query(`SELECT ${s}.nack_job($1, $2) AS st`, [b?.id, b?.lease_token])).rows[0].st).toBe('available');
    await denied(c.query(`SELECT * FROM ${s}.jobs`));
    await denied(c.query(`SELECT * FROM ${s}.api_tokens`));
    await denied(c.query(`INSERT INTO ${s}.jobs (task) VALUES ('sneaky')`));
    await denied(c.query(`SELECT ${s}.cancel_job(1)`));
    await denied(c.query(`SELECT * FROM ${s}.find_token('\\x00')`));
  });

  it('a producer enqueues (deduplicated too, with dependencies too), stages and reads its jobs, and cannot lease, change or delete them', async () => {
    const producer = new Tusk({ connectionString: as(logins.producer), schema: db.schema, logger: false });
    opened.push(producer);
    const { id } = await producer.enqueue('p', { n: 1 }, { queue: 'roles-p' });
    const first = await producer.enqueue('p', { n: 2 }, { queue: 'roles-p', dedupKey: 'k' });
    const again = await producer.enqueue('p', { n: 3 }, { queue: 'roles-p', dedupKey: 'k' });
    expect(again).toEqual({ id: first.id, deduplicated: true });
    expect(
      (await producer.enqueueMany(Array.from({ length: 300 }, () => ({ task: 'p', queue: 'roles-p' })))).ids,
    ).toHaveLength(300);
    expect((await producer.getJob(id))?.payload).toEqual({ n: 1 });
    const dependent = await producer.enqueue('p', null, { queue: 'roles-p', dependsOn: [id] });
    const flow = await producer.flow({ task: 'p', queue: 'roles-p', children: [{ task: 'p', queue: 'roles-p' }] });
    expect(await producer.getJob(dependent.id)).toMatchObject({ state: 'scheduled', waitingOn: 1, dependsOn: [id] });
    expect(await producer.getJob(flow.id)).toMatchObject({ state: 'scheduled', waitingOn: 1 });
    const c = await client(logins.producer);
    const s = `"${db.schema}"`;
    await c.query('BEGIN');
    const staged = await producer.stage(c, 'p', null, { queue: 'roles-p' });
    await c.query('COMMIT');
    expect(staged.id).toMatch(/^\d+$/);
    const fromSql = await c.query(`SELECT ${s}.enqueue_job('p', '{"via": "sql"}', '{"queue": "roles-p"}') AS id`);
    expect((await producer.getJob(fromSql.rows[0].id))?.payload).toEqual({ via: 'sql' });
    await denied(c.query(`SELECT * FROM ${s}.fetch_jobs(1, 1000)`));
    await denied(c.query(`UPDATE ${s}.jobs SET priority = 1`));
    await denied(c.query(`DELETE FROM ${s}.jobs`));
    await denied(c.query(`SELECT * FROM ${s}.job_deps`));
    await denied(c.query(`SELECT * FROM ${s}.tenants`));
    await denied(c.query(`SELECT * FROM ${s}.api_tokens`));
  });

  it('the API server serves with tokens and runs the upkeep, and cannot read or mint a token', async () => {
    const owner = await cli(cliEnv(db.url, db.schema), 'tokens', 'create', '--name', 'roles-test');
    expect(owner.code, owner.stderr).toBe(0);
    const token = owner.stdout
      .trim()
      .split(/\s+/)
      .find((w) => w.length >= 32) as string;
    const api = new Tusk({ connectionString: as(logins.api), schema: db.schema, logger: false });
    opened.push(api);
    const server = await createServer(api, { auth: 'token' });
    const listening = await server.listen({ port: 0 });
    try {
      const call = (method: string, path: string, body?: unknown) =>
        fetch(`${listening.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      const posted = await call('POST', '/api/jobs', { task: 'a', queue: 'roles-a' });
      expect(posted.status).toBe(201);
      const { jobs } = (await (await call('POST', '/api/fetch', { queue: 'roles-a' })).json()) as {
        jobs: Array<{ id: string; token: string }>;
      };
      expect(jobs).toHaveLength(1);
      expect((await call('POST', `/api/jobs/${jobs[0]?.id}/ack`, { token: jobs[0]?.token })).status).toBe(200);
      expect((await call('GET', '/api/jobs?queue=roles-a')).status).toBe(200);
      expect((await fetch(`${listening.url}/api/jobs`, { headers: { authorization: 'Bearer nope' } })).status).toBe(
        401,
      );
    } finally {
      await listening.close();
    }
    const report = await api.upkeep().runOnce();
    expect(report.queue?.errors).toEqual([]);
    // a Node worker runs with the API role's rights too
    const { id } = await api.enqueue('n', null, { queue: 'roles-node' });
    const worker = db.worker({ queues: ['roles-node'], tasks: { n: () => 'done' } }, api);
    await worker.start();
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'succeeded');
    await worker.stop();
    const c = await client(logins.api);
    const s = `"${db.schema}"`;
    await denied(c.query(`SELECT * FROM ${s}.api_tokens`));
    await denied(c.query(`INSERT INTO ${s}.api_tokens (name, token_hash, prefix) VALUES ('x', '\\x01', 'x')`));
    await denied(c.query(`CREATE TABLE ${s}.sneaky (x int)`));
  });

  it("what a later migration creates is the API role's at once, and no other role's", async () => {
    const s = `"${db.schema}"`;
    // as a migration would, as the schema's owner, after the roles were made
    await db.pool.query(`CREATE TABLE ${s}.later_table (id bigserial PRIMARY KEY, x int)`);
    await db.pool.query(`CREATE FUNCTION ${s}.later_function() RETURNS int LANGUAGE sql AS 'SELECT 1'`);
    await db.pool.query(`REVOKE EXECUTE ON FUNCTION ${s}.later_function() FROM PUBLIC`);
    const api = await client(logins.api);
    await api.query(`INSERT INTO ${s}.later_table (x) VALUES (1)`);
    await api.query(`UPDATE ${s}.later_table SET x = 2`);
    expect((await api.query(`SELECT x FROM ${s}.later_table`)).rows).toEqual([{ x: 2 }]);
    await api.query(`DELETE FROM ${s}.later_table`);
    expect((await api.query(`SELECT ${s}.later_function() AS one`)).rows).toEqual([{ one: 1 }]);
    for (const login of [logins.producer, logins.worker]) {
      const other = await client(login);
      await denied(other.query(`SELECT x FROM ${s}.later_table`));
      await denied(other.query(`SELECT ${s}.later_function()`));
    }
  });

  it('an upgrade that moves the extend to working() grants it to the roles that held extend_lease', async () => {
    const s = `"${db.schema}"`;
    // the schema as it was before working(): its roles made then, extend_lease theirs
    await db.pool.query(`DROP FUNCTION ${s}.working(bigint, bigint, integer)`);
    await db.pool.query(`DELETE FROM ${s}.migrations WHERE version >= 60`);
    await db.tusk.migrate();
    const may = async (role: string) =>
      (
        await db.rows<{ ok: boolean }>(`SELECT has_function_privilege($1, $2, 'EXECUTE') AS ok`, [
          role,
          `${s}.working(bigint, bigint, integer)`,
        ])
      )[0]?.ok;
    // before, the worker role lost its extend until `tusk roles create` ran again
    expect(await may(`${prefix}_worker`)).toBe(true);
    expect(await may(`${prefix}_api`)).toBe(true);
    expect(await may(`${prefix}_producer`)).toBe(false);
    const { id } = await db.tusk.enqueue('w', null, { queue: 'roles-upgrade' });
    const c = await client(logins.worker);
    const [leased] = (await c.query(`SELECT id::text, lease_token FROM ${s}.fetch_jobs(1, 30000, 'roles-upgrade')`))
      .rows;
    expect(leased?.id).toBe(id);
    const told = await c.query(`SELECT * FROM ${s}.working($1, $2, 60000)`, [leased?.id, leased?.lease_token]);
    expect(told.rows[0]).toMatchObject({ cancel_requested: false });
  });
});
