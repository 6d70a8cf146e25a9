import { describe, expect, it } from 'vitest';
import type { Job } from '../src/index.js';
import { cliEnv, exited, startWorker, useExecutionsTable } from './cli.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

useExecutionsTable(db);

describe('crash recovery', () => {
  it('a job whose worker process is killed with SIGKILL mid-job runs again on another worker, long before its lease ends', async () => {
    // a 10-minute lease: the job can only come back this soon if the dead worker is noticed
    const child = startWorker(cliEnv(db.url, db.schema), '--concurrency', '1', '--lease-ms', '600000');
    try {
      const { id } = await db.tusk.enqueue('record', { ms: 60_000 });
      const first = await eventually(async () => {
        const rows = await db.rows<{ pid: number }>('SELECT pid FROM $schema.executions WHERE job_id = $1', [id]);
        return rows[0];
      }, 20_000);
      expect(first?.pid).toBe(child.pid);

      let rerunAt = 0;
      const survivor = db.worker({
        tasks: {
          record: (_p, ctx) => {
            rerunAt = Date.now();
            return { attempt: ctx.job.attempt };
          },
        },
      });
      await survivor.start();
      const killedAt = Date.now();
      child.kill('SIGKILL');
      await exited(child);
      const job = (await eventually(async () => {
        const j = await db.tusk.getJob(id);
        return j?.state === 'succeeded' ? j : null;
      }, 120_000)) as Job;
      await survivor.stop();

      const recoveryMs = rerunAt - killedAt;
      console.log(`crash recovery: SIGKILL to re-run on another worker in ${recoveryMs} ms`);
      // generous: a loaded machine delays it by seconds, waiting out the lease would take minutes
      expect(recoveryMs).toBeLessThan(120_000);
      expect(job.attempts).toBe(2);
      expect(job.result).toEqual({ attempt: 2 });
      expect(job.errors).toHaveLength(1);
      expect(job.errors[0]?.message).toMatch(/^worker \d+ died while running the job$/);
      expect((await db.tusk.tenants.list()).every((t) => t.running === 0)).toBe(true);
      const workers = await db.rows(`SELECT id FROM $schema.workers`);
      expect(workers).toHaveLength(0);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('a job whose lease runs out (a stalled worker) is returned to the queue, and the stalled worker cannot finish it', async () => {
    // an external lease (no worker) that is never acked: only the lease protects it.
    // Upkeep is done by any running worker; this one serves another queue.
    const upkeep = db.worker({ queues: ['elsewhere'], tasks: {} });
    await upkeep.start();
    const { id } = await db.tusk.enqueue('leased', {}, { queue: 'lease' });
    const [claimed] = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM $schema.claim_jobs(NULL, 1, 200, ARRAY['lease'])`,
    );
    expect(claimed?.id).toBe(id);
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'available', 5_000);
    // the original holder comes back and tries to finish: fenced by its lease token
    const re = await db.rows(`SELECT $schema.claim_jobs(NULL, 1, 60000, ARRAY['lease'])`);
    expect(re).toHaveLength(1);
    const late = await db.rows(`SELECT * FROM $schema.finish_jobs('succeeded', $1::jsonb)`, [
      JSON.stringify([{ id, token: claimed?.lease_token }]),
    ]);
    expect(late).toHaveLength(0);
    const job = await db.tusk.getJob(id);
    expect(job).toMatchObject({ state: 'running', attempts: 2 });
    expect(job?.errors[0]?.message).toBe('lease expired before the job finished');
    await upkeep.stop();
  });
  it('a frozen worker (SIGSTOP past its lease) does not start the jobs it had buffered once it wakes: they are re-leased', async () => {
    const frozen = startWorker(
      cliEnv(db.url, db.schema),
      '--concurrency',
      '1',
      '--prefetch',
      '20',
      '--lease-ms',
      '1500',
      '-q',
      'frozen',
    );
    try {
      const { ids } = await db.tusk.enqueueMany(
        Array.from({ length: 12 }, () => ({ task: 'record', queue: 'frozen', payload: { ms: 300 } })),
      );
      // it runs one and holds the others in its buffer
      await eventually(
        async () => (await db.rows('SELECT 1 FROM $schema.executions WHERE pid = $1', [frozen.pid])).length > 0,
        20_000,
      );
      frozen.kill('SIGSTOP');
      // another worker takes the jobs over once their leases have run out
      const other = db.worker({
        queues: ['frozen'],
        tasks: {
          record: async (_p, ctx) => {
            await db.pool.query(`INSERT INTO "${db.schema}".executions (job_id, attempt, pid) VALUES ($1, $2, 0)`, [
              ctx.job.id,
              ctx.job.attempt,
            ]);
          },
        },
      });
      await other.start();
      await eventually(
        async () => (await db.rows('SELECT 1 FROM $schema.jobs WHERE queue = $1', ['frozen'])).length === 0,
        20_000,
      );
      // what it started before it was stopped, read once every job went to the other worker
      // (a lease later): a start whose INSERT was on its way as the signal came lands after
      // the stop by the database's clock, and was taken for a start after waking
      const before = await db.rows<{ start: string }>(
        `SELECT job_id || ':' || attempt AS start FROM $schema.executions WHERE pid = $1`,
        [frozen.pid],
      );
      frozen.kill('SIGCONT');
      await new Promise((r) => setTimeout(r, 1500)); // it wakes, finishes its job, looks at its buffer
      await other.stop();
      const late = await db.rows<{ job_id: string }>(
        `SELECT job_id::text FROM $schema.executions WHERE pid = $1 AND NOT (job_id || ':' || attempt = ANY($2::text[]))`,
        [frozen.pid, before.map((r) => r.start)],
      );
      expect(late, 'jobs the frozen worker started after waking up').toEqual([]);
      const history = await db.rows<{ id: string; attempts: number }>(
        'SELECT id::text, attempts FROM $schema.job_history WHERE id = ANY($1::bigint[])',
        [ids],
      );
      expect(history).toHaveLength(12);
    } finally {
      frozen.kill('SIGCONT');
      frozen.kill('SIGTERM');
      await exited(frozen);
    }
  });
});
