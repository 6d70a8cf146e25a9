// Task definitions shared through the database: a worker records its tasks' definitions
// when it starts, and producers without the task list apply them — a library instance,
// `tusk enqueue`, `POST /api/jobs` (queue, tenant, attempts, the payload's JSON Schema) and
// the SQL enqueue (queue, tenant, attempts). Refused payloads write nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer, type Listening, TuskValidationError } from '../src/index.js';
import { tusk as cli, cliEnv } from './cli.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const ADMIN = 'task-definitions-admin-token-0123456789';
const INVALID = 'payload: does not match the schema of task "send_email": payload.to: must match format "email"';

const sendEmail = {
  queue: 'mail',
  tenant: 'acme',
  retry: { maxAttempts: 2, backoff: 250 },
  timeoutMs: 60_000,
  schema: z.object({ to: z.email(), cc: z.array(z.email()).optional() }),
  handler: () => {},
};

/** Starts and stops a worker with these tasks: what it records stays. */
async function recordBy(tasks: Parameters<typeof db.tusk.worker>[0]['tasks'], name: string) {
  const worker = db.worker({ tasks, name }, db.another());
  await worker.start();
  await worker.stop();
}

const jobCount = async () => Number((await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.jobs'))[0]?.n);
const job = async (id: string | bigint) =>
  (await db.rows('SELECT task, tenant, queue, max_attempts FROM $schema.jobs WHERE id = $1', [id]))[0];

let listening: Listening;
beforeAll(async () => {
  await recordBy({ send_email: sendEmail, plain: () => {} }, 'mailer-1');
  const server = await createServer(db.another(), { adminToken: ADMIN, dashboard: false, metrics: false });
  listening = await server.listen({ port: 0 });
});
afterAll(() => listening?.close());

describe('task definitions shared through the database', () => {
  it('a worker records its tasks: defaults, retry, time limit, the payload JSON Schema', async () => {
    const rows = await db.rows('SELECT * FROM $schema.task_definitions ORDER BY task');
    expect(rows).toMatchObject([
      {
        task: 'plain',
        tenant: null,
        queue: null,
        max_attempts: null,
        timeout_ms: 15 * 60_000,
        payload_schema: null,
        schema_missing: null,
        recorded_by: 'mailer-1',
      },
      {
        task: 'send_email',
        tenant: 'acme',
        queue: 'mail',
        max_attempts: 2,
        backoff: 250,
        timeout_ms: 60_000,
        isolated: false,
        payload_schema: { type: 'object', required: ['to'], properties: { to: { type: 'string', format: 'email' } } },
        schema_missing: null,
      },
    ]);
  });

  it('a library instance without the task list applies them; its own options win', async () => {
    const producer = db.another();
    const { id } = await producer.enqueue('send_email', { to: 'a@b.io' });
    expect(await job(id)).toEqual({ task: 'send_email', tenant: 'acme', queue: 'mail', max_attempts: 2 });
    const { id: other } = await producer.enqueue('send_email', { to: 'a@b.io' }, { queue: 'urgent', maxAttempts: 9 });
    expect(await job(other)).toMatchObject({ queue: 'urgent', max_attempts: 9 });
    const { ids } = await producer.enqueueMany([
      { task: 'plain', payload: 1 },
      { task: 'send_email', payload: { to: 'c@d.io' } },
    ]);
    expect(await job(ids[0] as string)).toMatchObject({ tenant: 'default', queue: 'default', max_attempts: 5 });
    expect(await job(ids[1] as string)).toMatchObject({ tenant: 'acme', queue: 'mail', max_attempts: 2 });
  });

  it('a library instance refuses a payload the recorded schema refuses, naming each issue; nothing is written', async () => {
    const producer = db.another();
    const before = await jobCount();
    const error = await producer.enqueue('send_email', { to: 'bad' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TuskValidationError);
    expect((error as Error).message).toBe(INVALID);
    const many = await producer
      .enqueueMany([
        { task: 'send_email', payload: { to: 'x@y.io' } },
        { task: 'send_email', payload: { cc: ['nope'] } },
      ])
      .catch((e: unknown) => e);
    expect((many as Error).message).toBe(
      'jobs[1].payload: does not match the schema of task "send_email": jobs[1].payload.to: is required; jobs[1].payload.cc[0]: must match format "email"',
    );
    expect(await jobCount()).toBe(before);
  });

  it('tusk enqueue applies them: queue and attempts of the definition; a refused payload exits 1, nothing written', async () => {
    const env = cliEnv(db.url, db.schema);
    const ok = await cli(env, 'enqueue', 'send_email', '{"to":"a@b.io"}');
    expect(ok.code, ok.stderr).toBe(0);
    const id = ok.stdout.match(/\d+/)?.[0] as string;
    expect(await job(id)).toEqual({ task: 'send_email', tenant: 'acme', queue: 'mail', max_attempts: 2 });
    const before = await jobCount();
    expect(await cli(env, 'enqueue', 'send_email', '{"to":"bad"}')).toEqual({
      code: 1,
      stdout: '',
      stderr: `tusk: ${INVALID}\n`,
    });
    expect(await jobCount()).toBe(before);
  });

  it('POST /api/jobs applies them; a refused payload is a 400 with the same message, nothing written', async () => {
    const post = (body: unknown) =>
      fetch(`${listening.url}/api/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const created = await post({ task: 'send_email', payload: { to: 'a@b.io' } });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    expect(await job(id)).toEqual({ task: 'send_email', tenant: 'acme', queue: 'mail', max_attempts: 2 });
    const before = await jobCount();
    const refused = await post({ task: 'send_email', payload: { to: 'bad' } });
    expect(refused.status).toBe(400);
    // the HTTP API names fields under the request's body
    expect(((await refused.json()) as { error: { message: string } }).error.message).toBe(`body.${INVALID}`);
    expect(await jobCount()).toBe(before);
  });

  it('the SQL enqueue applies their tenant, queue and attempts under the options it is given', async () => {
    const [one] = await db.rows<{ id: string }>(`SELECT $schema.enqueue_job('send_email', '{"to":"a@b.io"}') AS id`);
    expect(await job(one?.id as string)).toEqual({
      task: 'send_email',
      tenant: 'acme',
      queue: 'mail',
      max_attempts: 2,
    });
    const many = await db.rows<{ id: string }>(
      `SELECT id FROM $schema.enqueue_jobs('[{"task":"send_email","queue":"q2","retry":{"maxAttempts":7}},{"task":"plain"}]')`,
    );
    expect(await job(many[0]?.id as string)).toMatchObject({ tenant: 'acme', queue: 'q2', max_attempts: 7 });
    expect(await job(many[1]?.id as string)).toMatchObject({ tenant: 'default', queue: 'default', max_attempts: 5 });
  });

  it('the newest worker to start replaces a definition; a schema with no JSON Schema is recorded with the reason', async () => {
    await recordBy(
      { send_email: { queue: 'mail-v2', schema: z.custom<string>((v) => typeof v === 'string'), handler: () => {} } },
      'mailer-2',
    );
    const [row] = await db.rows("SELECT * FROM $schema.task_definitions WHERE task = 'send_email'");
    expect(row).toMatchObject({
      queue: 'mail-v2',
      tenant: null,
      max_attempts: null,
      payload_schema: null,
      recorded_by: 'mailer-2',
    });
    expect(row?.schema_missing).toMatch(/^its zod schema has no JSON Schema: .*Custom types cannot be represented/);
    // producers read definitions again after a few seconds; a new instance reads them at once
    const { id } = await db.another().enqueue('send_email', { to: 'not checked here' });
    expect(await job(id)).toMatchObject({ queue: 'mail-v2', tenant: 'default', max_attempts: 5 });
    await recordBy({ send_email: sendEmail }, 'mailer-1');
  });

  it("an instance's own definition wins over the recorded one", async () => {
    const own = db.another({ tasks: { send_email: { queue: 'local', handler: () => {} } } });
    const { id } = await own.enqueue('send_email', { to: 'bad' });
    expect(await job(id)).toMatchObject({ queue: 'local', tenant: 'default', max_attempts: 5 });
  });

  it('tusk tasks and GET /api/tasks list them', async () => {
    const env = cliEnv(db.url, db.schema);
    const table = await cli(env, 'tasks');
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^task +tenant +queue +attempts +backoff +timeout ms +payload schema +recorded by +recorded at$/,
    );
    expect(lines.slice(2).map((l) => l.split(/ {2,}/).slice(0, 8))).toEqual([
      ['plain', '-', '-', '-', '-', '900000', '-', 'mailer-1'],
      ['send_email', 'acme', 'mail', '2', '250', '60000', 'JSON Schema', 'mailer-1'],
    ]);
    const json = await cli(env, 'tasks', '--json');
    expect(JSON.parse(json.stdout)[1]).toMatchObject({ task: 'send_email', payloadSchema: { required: ['to'] } });

    const reply = await fetch(`${listening.url}/api/tasks`, { headers: { authorization: `Bearer ${ADMIN}` } });
    expect(reply.status).toBe(200);
    const { tasks } = (await reply.json()) as { tasks: Array<Record<string, unknown>> };
    expect(tasks.map((t) => [t.task, t.queue, t.maxAttempts, t.recordedBy])).toEqual([
      ['plain', null, null, 'mailer-1'],
      ['send_email', 'mail', 2, 'mailer-1'],
    ]);
  });
});
