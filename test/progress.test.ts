// ctx.progress: seen while the job runs, kept with the job once finished.
import { describe, expect, it } from 'vitest';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

describe('ctx.progress', () => {
  it('is seen in getJob while the job runs (the latest of many calls) and kept in history', async () => {
    let release = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    const worker = db.worker({
      queues: ['progress'],
      heartbeatMs: 100,
      tasks: {
        load: async (_p: unknown, ctx) => {
          for (let i = 1; i <= 1000; i++) ctx.progress({ done: i, of: 1000 }); // many calls, one write
          await gate;
          ctx.progress(99.5);
          return 'loaded';
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('load', null, { queue: 'progress' });
    const seen = async () => (await db.tusk.getJob(id))?.progress as { done?: number; of?: number } | null;
    await eventually(async () => (await seen())?.done === 1000);
    expect(await seen()).toEqual({ done: 1000, of: 1000 });
    expect((await db.tusk.getJob(id))?.state).toBe('running');
    release();
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'succeeded');
    expect(await db.tusk.getJob(id)).toMatchObject({ progress: 99.5, result: 'loaded' });
    await worker.stop();
  });

  it('refuses a value too big to write while the job runs: the attempt fails naming it', async () => {
    const worker = db.worker({
      queues: ['progress-big'],
      tasks: { big: (_p: unknown, ctx) => ctx.progress('x'.repeat(5000)) },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('big', null, { queue: 'progress-big', maxAttempts: 1 });
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'dead');
    expect((await db.tusk.getJob(id))?.error?.message).toMatch(/progress/);
    await worker.stop();
  });
});
