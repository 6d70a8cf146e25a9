// Handlers that misbehave: they throw what is not an Error, never return, or exhaust
// their memory. Each job fails with a readable error, following its retry policy, and
// the worker goes on running other jobs.
import { describe, expect, it } from 'vitest';
import { defineTask, type Job, type TaskDefinition, TuskValidationError } from '../src/index.js';
import { isolatedThreads } from '../src/tasks/isolate.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const HANDLERS = new URL('./fixtures/isolated.mjs', import.meta.url);
const isolated = (name: string, more: Partial<TaskDefinition> = {}): TaskDefinition => ({
  isolate: { module: HANDLERS, export: name, memoryMb: 32 },
  ...more,
});

const finished = (id: string): Promise<Job> =>
  eventually(async () => {
    const job = await db.tusk.getJob(id);
    return job && ['succeeded', 'dead', 'cancelled'].includes(job.state) ? job : null;
  }, 20_000) as Promise<Job>;

/** Enqueues on `queue` (one attempt unless said), waits until each job is finished. */
async function runAll(queue: string, tasks: string[], maxAttempts = 1): Promise<Job[]> {
  const { ids } = await db.tusk.enqueueMany(tasks.map((task) => ({ task, queue, maxAttempts, retry: { backoff: 0 } })));
  return Promise.all(ids.map((id) => finished(id)));
}

describe('handlers that throw what is not an Error', () => {
  it('record a readable error for each, and the worker keeps going', async () => {
    const circular: Record<string, unknown> = { name: 'loop' };
    circular.self = circular;
    const unreadable = new Error('hidden');
    Object.defineProperty(unreadable, 'message', {
      get() {
        throw new Error('gotcha');
      },
    });
    const trap = () => {
      throw new Error('trapped');
    };
    const throwers: Record<string, () => unknown> = {
      string: () => {
        throw 'boom';
      },
      undefined: () => {
        throw undefined;
      },
      null: () => {
        throw null;
      },
      number: () => Promise.reject(42),
      object: () => {
        throw { code: 'E_QUOTA', retryIn: [1, 2] };
      },
      circular: () => {
        throw circular;
      },
      symbol: () => {
        throw Symbol('sym');
      },
      bigint: () => {
        throw 10n;
      },
      unreadable: () => {
        throw unreadable;
      },
      proxy: () => {
        throw new Proxy({}, { get: trap, getPrototypeOf: trap, ownKeys: trap, has: trap });
      },
      unstorable: () => {
        throw new Error('NUL \u0000 and a lone \ud800 surrogate');
      },
      fine: () => ({ ok: true }),
    };
    const worker = db.worker({ queues: ['throws'], concurrency: 4, tasks: throwers });
    await worker.start();
    const jobs = await runAll('throws', Object.keys(throwers));
    expect(worker.state).toBe('running');
    const recorded = Object.fromEntries(jobs.map((j) => [j.task, [j.state, j.error?.name, j.error?.message]]));
    const nonError = (what: string) => ['dead', 'NonError', `a non-Error value was thrown: ${what}`];
    expect(recorded).toEqual({
      string: nonError('"boom"'),
      undefined: nonError('undefined'),
      null: nonError('null'),
      number: nonError('42'),
      object: nonError("{ code: 'E_QUOTA', retryIn: [ 1, 2 ] }"),
      circular: nonError("<ref *1> { name: 'loop', self: [Circular *1] }"),
      symbol: nonError('Symbol(sym)'),
      bigint: nonError('10n'),
      unreadable: ['dead', 'Error', '(its message could not be read)'],
      proxy: nonError('{}'),
      // jsonb stores neither NUL nor lone surrogates: they read as U+FFFD
      unstorable: ['dead', 'Error', 'NUL \ufffd and a lone \ufffd surrogate'],
      fine: ['succeeded', undefined, undefined],
    });
    // and after all that, the same worker still runs jobs
    const [after] = await runAll('throws', ['fine']);
    expect(after?.state).toBe('succeeded');
    await worker.stop();
    expect(worker.counters).toMatchObject({ dead: 11, succeeded: 2 });
  });
});

describe('handlers that never return', () => {
  it('time out per timeoutMs, the failure is recorded and retried, and the slot goes to the next job', async () => {
    const worker = db.worker({
      queues: ['hangs'],
      concurrency: 1, // the next job can only run once the hung one has let go of the slot
      tasks: {
        hang: { handler: () => new Promise(() => {}), timeoutMs: 200 },
        fine: () => 'ran',
      },
    });
    await worker.start();
    const [hung, fine] = await runAll('hangs', ['hang', 'fine'], 2);
    expect(hung).toMatchObject({ state: 'dead', attempts: 2 });
    expect(hung?.errors.map((e) => [e.name, e.message])).toEqual([
      ['JobTimeoutError', 'the job ran past its timeout of 200 ms'],
      ['JobTimeoutError', 'the job ran past its timeout of 200 ms'],
    ]);
    // with one slot, the fine job ran only because the hung one let go of it
    expect(fine).toMatchObject({ state: 'succeeded', result: 'ran' });
    await worker.stop();
  });

  it('an isolated handler spinning in a loop is stopped at its timeout: its thread is terminated', async () => {
    const worker = db.worker({
      queues: ['spins'],
      concurrency: 1,
      tasks: { spin: isolated('spin', { timeoutMs: 300 }), echo: isolated('default') },
    });
    await worker.start();
    const [spun, echoed] = await runAll('spins', ['spin', 'echo']);
    expect(spun?.error).toMatchObject({ name: 'JobTimeoutError', message: 'the job ran past its timeout of 300 ms' });
    expect(echoed?.state).toBe('succeeded');
    await eventually(() => isolatedThreads() === 0, 5000);
    await worker.stop();
  });
});

describe('handlers that exhaust their memory', () => {
  it('isolated with memoryMb: the job fails saying so, is retried, and the next job succeeds on the same worker', async () => {
    const worker = db.worker({
      queues: ['memory'],
      concurrency: 1,
      tasks: { grow: isolated('grow'), echo: isolated('default') },
    });
    await worker.start();
    const [grown] = await runAll('memory', ['grow'], 2);
    expect(grown).toMatchObject({ state: 'dead', attempts: 2 });
    expect(grown?.errors.map((e) => [e.name, e.message])).toEqual([
      ['HandlerCrashedError', 'the handler ran out of its 32 MB of memory (isolate.memoryMb)'],
      ['HandlerCrashedError', 'the handler ran out of its 32 MB of memory (isolate.memoryMb)'],
    ]);
    const { id } = await db.tusk.enqueue('echo', { after: 'the crash' }, { queue: 'memory' });
    const echoed = await finished(id);
    expect(echoed).toMatchObject({ state: 'succeeded', result: { payload: { after: 'the crash' }, inThread: true } });
    expect(worker.state).toBe('running');
    expect(worker.counters).toMatchObject({ retried: 1, dead: 1, succeeded: 1 });
    await worker.stop();
    await eventually(() => isolatedThreads() === 0, 5000);
  });
});

describe('isolated handlers', () => {
  it('get the payload and ctx.job, report stats, and return their result', async () => {
    const echo = defineTask('echo_isolated', { isolate: { module: HANDLERS.pathname } });
    const worker = db.worker({ queues: ['iso'], tasks: [echo] });
    await worker.start();
    const { id } = await db.tusk.enqueue('echo_isolated', { 名前: ['héllo', 1.5] }, { queue: 'iso' });
    const job = await finished(id);
    expect(job).toMatchObject({
      state: 'succeeded',
      stats: { seen: 1 },
      result: { payload: { 名前: ['héllo', 1.5] }, job: { id, task: 'echo_isolated', attempt: 1 }, inThread: true },
    });
    await worker.stop();
  });

  it('fail with what their thread threw, or how it died; bad exports and results fail clearly', async () => {
    const names = ['throwsError', 'throwsString', 'throwsLater', 'exits', 'unsendable', 'notAFunction', 'missing'];
    const worker = db.worker({
      queues: ['iso-fail'],
      concurrency: 4,
      tasks: Object.fromEntries(names.map((n) => [n, isolated(n)])),
    });
    await worker.start();
    const jobs = await runAll('iso-fail', names);
    const errors = Object.fromEntries(jobs.map((j) => [j.task, [j.state, j.error?.name, j.error?.message]]));
    expect(errors).toEqual({
      throwsError: ['dead', 'ResizeError', 'bad input in the thread'],
      throwsString: ['dead', 'NonError', 'a non-Error value was thrown: "a string, from the thread"'],
      throwsLater: ['dead', 'HandlerCrashedError', "the handler's thread crashed: uncaught in a timer"],
      exits: ['dead', 'HandlerCrashedError', "the handler's thread exited (code 3) before it finished"],
      unsendable: [
        'dead',
        'HandlerCrashedError',
        expect.stringMatching(/^the handler returned what cannot leave its thread: /),
      ],
      notAFunction: [
        'dead',
        'HandlerCrashedError',
        `${HANDLERS.href} has no export "notAFunction" that is a function (it is number)`,
      ],
      missing: [
        'dead',
        'HandlerCrashedError',
        `${HANDLERS.href} has no export "missing" that is a function (it is undefined)`,
      ],
    });
    expect(jobs.find((j) => j.task === 'throwsError')?.error?.stack).toMatch(
      /ResizeError: bad input in the thread\n\s+at throwsError/,
    );
    await worker.stop();
    await eventually(() => isolatedThreads() === 0, 5000);
  });

  it('a cancel stops the thread and the job ends cancelled', async () => {
    const worker = db.worker({ queues: ['iso-cancel'], tasks: { spin: isolated('spin') } });
    await worker.start();
    const { id } = await db.tusk.enqueue('spin', null, { queue: 'iso-cancel' });
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'running' && isolatedThreads() === 1);
    expect(await db.tusk.cancel(id)).toBe('running');
    expect((await finished(id)).state).toBe('cancelled');
    await eventually(() => isolatedThreads() === 0, 5000);
    await worker.stop();
  });

  it('refused when defined badly: both handler and isolate, a bad module, a bad memory limit', () => {
    const refused = (tasks: Record<string, unknown>, field: string, message: RegExp) => {
      const error = (() => {
        try {
          db.tusk.worker({ tasks: tasks as never });
        } catch (e) {
          return e;
        }
      })();
      expect(error).toBeInstanceOf(TuskValidationError);
      expect((error as TuskValidationError).field).toBe(field);
      expect((error as Error).message).toMatch(message);
    };
    refused(
      { a: { handler: () => 1, isolate: { module: HANDLERS } } },
      'worker options.tasks.a.isolate',
      /give handler or isolate, not both/,
    );
    refused(
      { a: { isolate: { module: './nowhere.mjs' } } },
      'worker options.tasks.a.isolate.module',
      /no such file: .*nowhere\.mjs/,
    );
    refused(
      { a: { isolate: { module: 5 } } },
      'worker options.tasks.a.isolate.module',
      /a file URL .* or a path \(got 5\)/,
    );
    refused(
      { a: { isolate: { module: HANDLERS, memoryMb: 4 } } },
      'worker options.tasks.a.isolate.memoryMb',
      /from 8 to 1000000 \(got 4\)/,
    );
    refused(
      { a: { isolate: { module: HANDLERS, memory: 64 } } },
      'worker options.tasks.a.isolate',
      /did you mean "memoryMb"/,
    );
    expect(() => defineTask('b', { handler: () => 1, isolate: { module: HANDLERS } })).toThrow(
      /^definition\.isolate: give handler or isolate/,
    );
  });
});
