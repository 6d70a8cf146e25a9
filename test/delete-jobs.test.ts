// Deleting jobs: waiting and finished ones go with their records; running ones and those
// other jobs depend on stay (cancel them instead); over HTTP, a tenant's token deletes its
// tenant's jobs only.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Listening } from '../src/index.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const ADMIN = 'delete-jobs-admin-token-0123456789';
let listening: Listening;
let acmeToken = '';

beforeAll(async () => {
  const server = await createServer(db.tusk, { adminToken: ADMIN, dashboard: false, metrics: false });
  acmeToken = (await server.tokens.create({ tenant: 'acme', scopes: ['read', 'manage'] })).token;
  listening = await server.listen({ port: 0 });
});
afterAll(() => listening?.close());

const rowsOf = async (id: string) =>
  Number(
    (
      await db.rows<{ n: string }>(
        'SELECT (SELECT count(*) FROM $schema.jobs WHERE id = $1) + (SELECT count(*) FROM $schema.job_history WHERE id = $1) AS n',
        [id],
      )
    )[0]?.n,
  );

describe('deleting jobs', () => {
  it('waiting (available, scheduled) and finished jobs are deleted with their records; unknown ids say so', async () => {
    const { id: waiting } = await db.tusk.enqueue('t', null, { queue: 'del' });
    const { id: later } = await db.tusk.enqueue('t', null, { queue: 'del', delayMs: 60_000 });
    const { id: done } = await db.tusk.enqueue('t', null, { queue: 'del' });
    await db.tusk.cancel(done);
    for (const id of [waiting, later, done]) {
      expect(await db.tusk.deleteJob(id)).toBe('deleted');
      expect(await db.tusk.getJob(id)).toBeNull();
      expect(await rowsOf(id)).toBe(0);
    }
    expect(await db.tusk.deleteJob(done)).toBe('not_found');
  });

  it('a running job stays (cancel it); so does a job others depend on, until it is settled', async () => {
    const { id: parent } = await db.tusk.enqueue('t', null, { queue: 'del-deps' });
    const { id: child } = await db.tusk.enqueue('t', null, { queue: 'del-deps', dependsOn: [parent] });
    expect(await db.tusk.deleteJob(parent)).toBe('has_dependents');
    expect(await db.tusk.deleteJob(child)).toBe('deleted'); // the dependent itself may go
    expect(await db.tusk.deleteJob(parent)).toBe('deleted'); // and then nothing depends on it
    const { id: busy } = await db.tusk.enqueue('t', null, { queue: 'del-run' });
    const [lease] = await db.tusk.fetch({ queue: 'del-run' });
    expect(lease?.id).toBe(busy);
    expect(await db.tusk.deleteJob(busy)).toBe('running');
    expect((await db.tusk.getJob(busy))?.state).toBe('running');
    await db.tusk.ack(lease as never, null);
    expect(await db.tusk.deleteJob(busy)).toBe('deleted');
  });

  it('a job whose waiting dependents ended otherwise (cancelled, expired) has none left: it is deleted, with their edges', async () => {
    for (const end of ['cancel', 'expire'] as const) {
      const { id: parent } = await db.tusk.enqueue('t', null, { queue: 'del-ended', delayMs: 3_600_000 });
      const { id: child } = await db.tusk.enqueue('t', null, { queue: 'del-ended', dependsOn: [parent] });
      if (end === 'cancel') await db.tusk.cancel(child);
      else {
        await db.pool.query(`UPDATE "${db.schema}".jobs SET expires_at = now() WHERE id = $1`, [child]);
        await db.pool.query(`SELECT "${db.schema}".expire_jobs()`);
      }
      expect((await db.tusk.getJob(child))?.state).toBe(end === 'cancel' ? 'cancelled' : 'expired');
      // before, the ended dependent's edge was left and the delete refused: has_dependents
      expect(await db.tusk.deleteJob(parent)).toBe('deleted');
      expect(await db.rows('SELECT 1 FROM $schema.job_deps WHERE dependency = $1 OR dependent = $1', [parent])).toEqual(
        [],
      );
    }
  });

  it('a dependency enqueued by a transaction still open: the delete waits for it and then refuses', async () => {
    const { id: parent } = await db.tusk.enqueue('t', null, { queue: 'del-race' });
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN');
      await db.tusk.enqueue('t', null, { queue: 'del-race', dependsOn: [parent], client: tx });
      const deleting = db.another().deleteJob(parent);
      // the delete waits on the dependency's row lock until the enqueue commits
      await new Promise((resolve) => setTimeout(resolve, 300));
      await tx.query('COMMIT');
      expect(await deleting).toBe('has_dependents');
    } finally {
      tx.release();
    }
  });

  it('DELETE /api/jobs/:id: 200, 409 for a running job, 404 for another tenant’s or an unknown one', async () => {
    const call = (id: string, token = ADMIN) =>
      fetch(`${listening.url}/api/jobs/${id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      });
    const { id: mine } = await db.tusk.enqueue('t', null, { tenant: 'acme', queue: 'del-http' });
    const { id: theirs } = await db.tusk.enqueue('t', null, { tenant: 'globex', queue: 'del-http' });
    expect((await call(theirs, acmeToken)).status).toBe(404);
    const ok = await call(mine, acmeToken);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ id: mine, deleted: true });
    expect((await call(mine)).status).toBe(404);
    const [lease] = await db.tusk.fetch({ queue: 'del-http' });
    const running = await call(lease?.id as string);
    expect(running.status).toBe(409);
    expect(((await running.json()) as { error: { message: string } }).error.message).toBe(
      `job ${lease?.id} is not deleted: it is running; cancel it instead`,
    );
  });
});
