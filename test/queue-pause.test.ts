// Pausing a queue stops its claims for every worker and consumer; resuming starts them again.
import { describe, expect, it } from 'vitest';
import { createServer } from '../src/index.js';
import { tusk as cli, cliEnv } from './cli.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const states = async (ids: string[]) => Promise.all(ids.map(async (id) => (await db.tusk.getJob(id))?.state));

describe('queue pause', () => {
  it('stops claims across workers and fetches, other queues go on; resume runs what waited', async () => {
    const ran: string[] = [];
    /** The workers that ran a probe job: each claimed after the paused queue's jobs were there. */
    const probed = new Set<number>();
    const options = (n: number) => ({
      queues: ['mail', 'other'],
      pollMs: 50,
      tasks: {
        t: (_p: unknown, ctx: { job: { queue: string } }) => void ran.push(ctx.job.queue),
        probe: () => void probed.add(n),
      },
    });
    const workers = [db.worker(options(0)), db.worker(options(1))];
    await Promise.all(workers.map((w) => w.start()));
    expect(await db.tusk.queues.pause('mail')).toBe(true);
    expect(await db.tusk.queues.pause('mail')).toBe(false); // already
    expect((await db.tusk.queues.paused()).map((q) => q.queue)).toEqual(['mail']);

    const { ids: mail } = await db.tusk.enqueueMany(Array.from({ length: 5 }, () => ({ task: 't', queue: 'mail' })));
    const { id: other } = await db.tusk.enqueue('t', null, { queue: 'other' });
    await eventually(async () => (await db.tusk.getJob(other))?.state === 'succeeded');
    // the other queue ran; a fetch of the paused one gets nothing
    expect(await db.tusk.fetch({ queue: 'mail' })).toEqual([]);
    // each worker claims a probe job of the other queue, one at a time until both have: a
    // claim covers both queues, oldest first, so each would have taken mail's jobs
    await eventually(async () => {
      const { id } = await db.tusk.enqueue('probe', null, { queue: 'other' });
      expect((await db.tusk.waitFor(id))?.state).toBe('succeeded');
      return probed.size === 2;
    });
    expect(await states(mail)).toEqual(Array(5).fill('available'));
    expect(ran).toEqual(['other']);

    expect(await db.tusk.queues.resume('mail')).toBe(true);
    await eventually(async () => (await states(mail)).every((s) => s === 'succeeded'));
    expect(await db.tusk.queues.paused()).toEqual([]);
    await Promise.all(workers.map((w) => w.stop()));
  });

  it('from the CLI and over HTTP', async () => {
    const env = cliEnv(db.url, db.schema);
    const paused = await cli(env, 'queues', 'pause', 'reports');
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toContain('queue reports paused');
    expect((await cli(env, 'queues', 'paused')).stdout).toMatch(/^reports\t\d{4}-/);
    const server = await createServer(db.tusk, { auth: 'none' });
    const app = server.app;
    const post = (path: string) =>
      app.request(path, { method: 'POST', headers: { host: '127.0.0.1', 'content-type': 'application/json' } });
    expect(await (await post('/api/queues/reports/resume')).json()).toEqual({
      queue: 'reports',
      paused: false,
      changed: true,
    });
    expect(await (await post('/api/queues/reports/pause')).json()).toMatchObject({ paused: true, changed: true });
    const list = await app.request('/api/queues/paused', { headers: { host: '127.0.0.1' } });
    expect(((await list.json()) as { queues: Array<{ queue: string }> }).queues.map((q) => q.queue)).toEqual([
      'reports',
    ]);
    expect((await post(`/api/queues/${'x'.repeat(200)}/pause`)).status).toBe(400);
    await server.close();
    expect((await cli(env, 'queues', 'resume', 'reports')).stdout).toContain('queue reports resumed');
  });
});
