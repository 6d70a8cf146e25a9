/**
 * The races of a worker that stalls past its lease and of cancels that must stick, each
 * forced once per call: the fast files run them a few times, the stress file
 * (fencing.stress.ts) 50 times. `trial` keeps each run's queue apart.
 */
import { expect } from 'vitest';
import { exited } from '../cli.js';
import { eventually, sleep, type TestDb } from '../helpers.js';
import { settledStates, stateAfter } from './common.js';
import { sqlToken, startUpkeep } from './hooks.js';
import { PgProxy } from './proxy.js';
import { describeSpans, overlaps, recordedSpans, Spans, startSpanWorker } from './spans.js';

/** What a stalled job must come to: its runs never side by side, then one success, no cascade of attempts. */
async function expectOneRunAtATime(db: TestDb, id: string, spans: Parameters<typeof overlaps>[0], trial: number) {
  const job = await db.tusk.getJob(id);
  const sideBySide = overlaps(spans, (s) => s.job).length;
  expect(
    { sideBySide, state: job?.state, cascaded: (job?.attempts ?? 0) > 3 },
    `trial ${trial}: ${sideBySide} pairs of runs side by side, ${job?.state} after ${job?.attempts} attempts\n${describeSpans(spans)}`,
  ).toEqual({ sideBySide: 0, state: 'succeeded', cascaded: false });
}

/**
 * A worker process running a 3 s job with a 1.5 s lease is frozen
 * (SIGSTOP) for 2.5 s; meanwhile upkeep requeues the job; the worker is thawed. It must not
 * run attempt 1 on while it runs attempt 2.
 */
export async function stallBySigstop(db: TestDb, trial: number): Promise<void> {
  const queue = `stall-sigstop-${trial}`;
  const child = startSpanWorker(db, '--concurrency', '4', '--lease-ms', '1500', '-q', queue);
  try {
    const { id } = await db.tusk.enqueue('span', { ms: 3000 }, { queue });
    await eventually(async () => (await recordedSpans(db, [id])).length > 0, 20_000);
    const upkeep = await startUpkeep(db);
    try {
      child.kill('SIGSTOP');
      await sleep(2500);
      child.kill('SIGCONT');
      await settledStates(db, [id], 15_000);
    } finally {
      await upkeep.stop();
    }
    await expectOneRunAtATime(db, id, await recordedSpans(db, [id]), trial);
  } finally {
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited(child);
    clearTimeout(timer);
  }
}

/**
 * The same, forced: the worker's queries reach the database but the replies are held for
 * 1.8 s (a one-way network stall), past its 1 s lease. The heartbeat in flight at the
 * start answers, late, that the job is still held; upkeep requeues it meanwhile; once the
 * replies flow the worker claims the job again. Attempt 1 must be stopped before attempt
 * 2 runs, and attempt 2's lease kept.
 */
export async function stallByHeldReplies(db: TestDb, trial: number): Promise<void> {
  const queue = `stall-replies-${trial}`;
  const proxy = new PgProxy(db.url);
  await proxy.start();
  const spans = new Spans();
  const behind = db.another({ connectionString: proxy.url });
  const worker = db.worker(
    {
      queues: [queue],
      concurrency: 4,
      leaseMs: 1000,
      heartbeatMs: 250,
      pollMs: 100,
      tasks: { span: spans.handler('the stalled worker') },
    },
    behind,
  );
  try {
    await worker.start();
    const { id } = await db.tusk.enqueue('span', { ms: 2000 }, { queue });
    await eventually(() => spans.all.length > 0);
    const upkeep = await startUpkeep(db);
    try {
      proxy.holdReplies();
      await sleep(1800);
      proxy.heal();
      await settledStates(db, [id], 10_000);
    } finally {
      await upkeep.stop();
    }
    await expectOneRunAtATime(db, id, spans.all, trial);
  } finally {
    proxy.heal();
    await worker.stop();
    await behind.close();
    await proxy.close();
  }
}

/** The job's end once cancelled: never leased again, and `cancelled`. */
async function expectCancelled(db: TestDb, id: string, queue: string, answer: string | null, trial: number) {
  const leasedAgain = (await db.tusk.fetch({ queue })).map((l) => `attempt ${l.attempt}`);
  const [final] = await settledStates(db, [id], 2000);
  expect(
    { answer: answer === 'running' || answer === 'cancelled' ? 'running or cancelled' : answer, leasedAgain, final },
    `trial ${trial}: cancel() answered ${answer}, leased again ${leasedAgain.length} times, ${final} at the end`,
  ).toEqual({ answer: 'running or cancelled', leasedAgain: [], final: 'cancelled' });
}

/**
 * Upkeep: a leased job is cancelled (cancel() answers `running`), its holder
 * never comes back, its lease runs out and upkeep takes it back: it must end cancelled,
 * not run again.
 */
export async function cancelThenLeaseRunsOut(db: TestDb, trial: number): Promise<void> {
  const queue = `cancel-reaped-${trial}`;
  const { id } = await db.tusk.enqueue('cancel_me', null, { queue, maxAttempts: 3 });
  const [lease] = await db.tusk.fetch({ queue, leaseMs: 200 });
  expect(lease?.id).toBe(id);
  const answer = await db.tusk.cancel(id);
  expect(answer, 'cancel() of a leased job').toBe('running');
  const upkeep = await startUpkeep(db);
  try {
    await stateAfter(db, id, ['running']);
    await expectCancelled(db, id, queue, answer, trial);
  } finally {
    await upkeep.stop();
  }
}

/** Waits until some session waits for `pid` (a lock it holds), or `call` has settled, or 3 s. */
async function blockedBy(db: TestDb, pid: number, call: Promise<unknown>): Promise<void> {
  let settled = false;
  void call.then(
    () => (settled = true),
    () => (settled = true),
  );
  const deadline = Date.now() + 3000;
  while (!settled && Date.now() < deadline) {
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))',
      [pid],
    );
    if (rows[0].n > 0) return;
    await sleep(10);
  }
}

/**
 * A nack: cancel() runs while a nack of the job is committing (the nack's
 * transaction is held open, through the documented SQL function). cancel() must not
 * answer "unknown job", and the job must end cancelled.
 */
export async function cancelDuringNack(db: TestDb, trial: number): Promise<void> {
  const queue = `cancel-nacked-${trial}`;
  const { id } = await db.tusk.enqueue('cancel_me', null, { queue, maxAttempts: 3 });
  const [lease] = await db.tusk.fetch({ queue });
  if (lease?.id !== id) throw new Error(`job ${id} should have been leased`);
  const client = await db.pool.connect();
  let answer: string | null;
  try {
    await client.query('BEGIN');
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    await client.query(`SELECT "${db.schema}".nack_job($1, $2, 0)`, [id, sqlToken(lease)]);
    const cancelling = db.tusk.cancel(id);
    await blockedBy(db, pid, cancelling);
    await client.query('COMMIT');
    answer = await cancelling;
  } finally {
    client.release();
  }
  const upkeep = await startUpkeep(db);
  try {
    await expectCancelled(db, id, queue, answer, trial);
  } finally {
    await upkeep.stop();
  }
}

/**
 * A worker: cancel() runs as the handler fails and the worker writes the failed
 * attempt back (to be retried 10 ms later). The job must end cancelled, its handler not
 * run again.
 */
export async function cancelDuringFailure(db: TestDb, trial: number): Promise<void> {
  const queue = `cancel-failing-${trial}`;
  let runs = 0;
  let release = () => {};
  const gate = new Promise<void>((resolve) => (release = resolve));
  const worker = db.worker({
    queues: [queue],
    tasks: {
      fail_me: async () => {
        runs++;
        await gate;
        throw new Error('the handler failed');
      },
    },
  });
  await worker.start();
  const upkeep = await startUpkeep(db);
  try {
    const { id } = await db.tusk.enqueue('fail_me', null, { queue, maxAttempts: 3, retry: { backoff: 10 } });
    await eventually(() => runs > 0);
    release();
    const answer = await db.tusk.cancel(id);
    await expectCancelled(db, id, queue, answer, trial);
    expect(runs, `trial ${trial}: runs of the cancelled job's handler`).toBe(1);
  } finally {
    await upkeep.stop();
    await worker.stop();
  }
}
