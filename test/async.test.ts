import { describe, expect, it } from 'vitest';
import { type Job, type JobContext, Tusk, TuskError, TuskValidationError } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const finished = (tusk: Tusk, id: string): Promise<Job> =>
  eventually(async () => {
    const job = await tusk.getJob(id);
    return job && ['succeeded', 'dead', 'cancelled', 'expired'].includes(job.state) ? job : null;
  }) as Promise<Job>;

/** The application's records: a table of reports (in memory here). */
const reports = new Map<number, DataReport>();

class DataReport {
  static find(id: string): Promise<DataReport | undefined> {
    return Promise.resolve(reports.get(Number(id)));
  }
  /** Calls of `execute` made by workers, with the tenant that loaded the report. */
  static runs: Array<{ id: number; tenant: string }> = [];
  title: string;
  constructor(
    readonly id: number,
    title: string,
  ) {
    this.title = title;
    reports.set(id, this);
  }
  async execute(format: 'pdf' | 'csv', pages?: number): Promise<{ file: string }> {
    return { file: `${this.title}-${this.id}.${format}${pages ? `:${pages}` : ''}` };
  }
  fail(reason: string): never {
    throw new Error(`report ${this.id}: ${reason}`);
  }
  summarize(options: { top: number; by: string[] }, note: string | null): string {
    return `${this.title} top ${options.top} by ${options.by.join('+')} (${note})`;
  }
  /** A getter is not a method: it cannot be called as a job. */
  get size(): number {
    return this.title.length;
  }
}

class QuarterlyReport extends DataReport {
  override async execute(format: 'pdf' | 'csv'): Promise<{ file: string }> {
    return { file: `Q-${this.id}.${format}` };
  }
}

/** A Tusk where DataReport is registered: it enqueues the calls, and its workers run them. */
const makeTusk = () => {
  const tusk = db.another();
  tusk.register(DataReport, {
    load: (id, ctx: JobContext) => {
      DataReport.runs.push({ id: Number(id), tenant: ctx.job.tenant });
      return DataReport.find(id);
    },
    id: (r) => r.id,
    queue: 'reports',
    retry: { maxAttempts: 2, backoff: 0 },
  });
  return tusk;
};

describe('tusk.async', () => {
  const tusk = makeTusk();
  const report = new DataReport(42, 'sales');

  it('enqueues a method call; the worker loads the instance by id and calls it; the result is the return value', async () => {
    const { id } = await tusk.async(report).execute('pdf', 3);
    const waiting = await tusk.getJob(id);
    expect(waiting).toMatchObject({
      task: 'DataReport.execute',
      queue: 'reports', // the class's default
      payload: ['pdf', 3],
      maxAttempts: 2,
      source: { type: 'DataReport', id: '42', method: 'execute' },
    });
    const worker = db.worker({ queues: ['reports'] }, tusk);
    await worker.start();
    const job = await finished(tusk, id);
    await worker.stop();
    expect(job).toMatchObject({
      state: 'succeeded',
      result: { file: 'sales-42.pdf:3' },
      source: { type: 'DataReport', id: '42', method: 'execute' },
    });
  });

  it('takes enqueue options: tenant, queue, delay, priority', async () => {
    const before = Date.now();
    const { id } = await tusk
      .async(report, { tenant: 'acme', queue: 'slow', delayMs: 60_000, priority: 3 })
      .summarize({ top: 5, by: ['region', 'month'] }, null);
    const job = (await tusk.getJob(id)) as Job;
    expect(job).toMatchObject({
      task: 'DataReport.summarize',
      tenant: 'acme',
      queue: 'slow',
      priority: 3,
      state: 'scheduled',
      payload: [{ top: 5, by: ['region', 'month'] }, null],
    });
    expect(job.runAt.getTime()).toBeGreaterThanOrEqual(before + 59_000);
    await tusk.cancel(id);
    // the source goes to history with the job
    expect((await tusk.getJob(id))?.source).toEqual({ type: 'DataReport', id: '42', method: 'summarize' });
  });

  it('runs the call under its tenant, and a subclass instance through its registered base class', async () => {
    DataReport.runs = [];
    const quarterly = new QuarterlyReport(7, 'q3');
    const worker = db.worker({ queues: ['reports'] }, tusk);
    await worker.start();
    const { id } = await tusk.async(quarterly, { tenant: 'initech' }).execute('csv');
    const job = await finished(tusk, id);
    await worker.stop();
    expect(job).toMatchObject({ state: 'succeeded', task: 'DataReport.execute', result: { file: 'Q-7.csv' } });
    expect(DataReport.runs).toEqual([{ id: 7, tenant: 'initech' }]);
  });

  it('records failures of the method, and a record that cannot be loaded, like any job; retry keeps the source', async () => {
    const gone = new DataReport(404, 'gone');
    const failing = await tusk.async(report).fail('no data');
    const missing = await tusk.async(gone).execute('pdf');
    reports.delete(404);
    const worker = db.worker({ queues: ['reports'] }, tusk);
    await worker.start();
    const [f, m] = await Promise.all([finished(tusk, failing.id), finished(tusk, missing.id)]);
    await worker.stop();
    expect(f).toMatchObject({ state: 'dead', attempts: 2, error: { message: 'report 42: no data' } });
    expect(m).toMatchObject({
      state: 'dead',
      error: { message: 'DataReport "404" not found (load returned undefined)' },
    });
    expect(await tusk.retry(m.id)).toBe(true);
    expect(await tusk.getJob(m.id)).toMatchObject({
      state: 'available',
      source: { type: 'DataReport', id: '404', method: 'execute' },
    });
  });

  it('deduplicates calls on the same instance only', async () => {
    const other = new DataReport(43, 'costs');
    const a = await tusk.async(report, { dedupe: true, tenant: 'dedup' }).execute('csv');
    const b = await tusk.async(report, { dedupe: true, tenant: 'dedup' }).execute('csv');
    const c = await tusk.async(other, { dedupe: true, tenant: 'dedup' }).execute('csv');
    expect(b).toEqual({ id: a.id, deduplicated: true });
    expect(c.deduplicated).toBe(false);
    expect((await tusk.getJob(c.id))?.source).toEqual({ type: 'DataReport', id: '43', method: 'execute' });
  });

  it('enqueues inside the caller transaction', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { id } = await tusk.async(report, { client, queue: 'tx' }).execute('pdf');
      await client.query('ROLLBACK');
      expect(await tusk.getJob(id)).toBeNull();
    } finally {
      client.release();
    }
  });

  it('refuses arguments that are not JSON data, naming the argument; nothing written', async () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    const calls = tusk.async(report) as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    const summarize = (...args: unknown[]) => calls.summarize?.(...args) as Promise<unknown>;
    const cases: Array<[unknown[], string]> = [
      [[() => 1], 'args[0]: DataReport.summarize is called with JSON data: got a function'],
      [[Symbol('s')], 'args[0]: DataReport.summarize is called with JSON data: got a symbol'],
      [
        [{ top: 10n }],
        'args[0].top: DataReport.summarize is called with JSON data: got 10n (a BigInt): send it as a string',
      ],
      [[new Date(0)], 'args[0]: DataReport.summarize is called with JSON data: got a Date: send date.toISOString()'],
      [[{ by: [new Map()] }], 'args[0].by[0]: DataReport.summarize is called with JSON data: got an instance of Map'],
      [[report], 'args[0]: DataReport.summarize is called with JSON data: got an instance of DataReport'],
      [[circular], 'args[0].self: DataReport.summarize is called with JSON data: it contains a circular reference'],
      [[{ top: Number.NaN }], 'args[0].top: DataReport.summarize is called with JSON data: NaN is not JSON'],
      [[undefined, 'x'], 'args[0]: DataReport.summarize is called with JSON data: undefined would arrive as null'],
      [[{ by: ['a', undefined] }], 'args[0].by[1]: DataReport.summarize is called with JSON data: undefined would'],
      [['\u0000'], 'payload[0]: must not contain NUL characters'],
    ];
    for (const [args, message] of cases) {
      const error = await summarize(...args).catch((e: unknown) => e);
      expect(error, message).toBeInstanceOf(TuskValidationError);
      expect((error as Error).message).toContain(message);
    }
    const [row] = await db.rows<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.jobs WHERE task = 'DataReport.summarize'`,
    );
    expect(row?.n).toBe(0);
    // trailing undefined arguments are left out, as a call would leave them
    const { id } = await tusk.async(report).execute('pdf', undefined);
    expect((await tusk.getJob(id))?.payload).toEqual(['pdf']);
  });

  it('refuses what is not a registered class, a method, or a usable id', async () => {
    class Unregistered {
      run() {}
    }
    expect(() => tusk.async(new Unregistered())).toThrow(TuskError);
    expect(() => tusk.async(new Unregistered())).toThrow(
      'Unregistered is not registered: call tusk.register(Unregistered, { load, id }) first',
    );
    const calls = tusk.async(report) as unknown as Record<string, unknown>;
    expect(() => calls.title).toThrow('method: DataReport has no method "title"');
    expect(() => calls.size).toThrow('method: DataReport has no method "size"');
    expect(() => calls.constructor).toThrow('method: DataReport has no method "constructor"');
    expect(() => tusk.async(report, { source: { type: 'X', id: 1 } } as never)).toThrow(
      'options.source: is the instance given to async()',
    );
    expect(() => tusk.async(report, { delayMs: -1 })).toThrow(/^options\.delayMs: must be an integer/);

    const other = db.another();
    other.register(DataReport, { load: DataReport.find, id: () => '' });
    expect(() => other.async(report)).toThrow(
      'DataReport id: must be a string of 1 to 256 characters or an integer (the id option gave "")',
    );
    expect(() => other.register(DataReport, { load: DataReport.find, id: (r) => r.id })).toThrow(
      'class: DataReport is registered already',
    );
    expect(() => other.register(class {}, { load: () => null, id: () => 1 })).toThrow(
      'options.name: is needed: the class has no name',
    );
    expect(() => other.register(QuarterlyReport, { load: () => null, id: () => 1, name: 'DataReport' })).toThrow(
      'options.name: "DataReport" is the name of another registered class',
    );
    expect(() => other.register(QuarterlyReport, { load: () => null, id: () => 1, name: 'a.b' })).toThrow(
      /^options\.name: must not contain "\."/,
    );
  });

  it('a worker of an instance without the class fails the job as an unknown task', async () => {
    const { id } = await tusk.async(report, { queue: 'elsewhere', maxAttempts: 1 }).execute('pdf');
    const worker = db.worker({ queues: ['elsewhere'], tasks: { other: () => 1 } });
    await worker.start();
    const job = await finished(db.tusk, id);
    await worker.stop();
    expect(job.error).toMatchObject({
      name: 'UnknownTaskError',
      message: 'no handler for task "DataReport.execute" in this worker (it has: "other")',
    });
  });
});

describe('the source of a job', () => {
  it('is kept through every way of enqueueing, and can be queried', async () => {
    const source = { type: 'Invoice', id: 9, method: 'send' };
    const one = await db.tusk.enqueue('mail', {}, { source, queue: 'src' });
    const dedup = await db.tusk.enqueue('mail', {}, { source, dedupe: true, queue: 'src' });
    const bulk = await db.tusk.enqueueMany(
      Array.from({ length: 600 }, (_, i) => ({ task: 'mail', queue: 'src', source: { type: 'Invoice', id: `i${i}` } })),
    );
    expect((await db.tusk.getJob(one.id))?.source).toEqual({ type: 'Invoice', id: '9', method: 'send' });
    expect((await db.tusk.getJob(dedup.id))?.source).toEqual({ type: 'Invoice', id: '9', method: 'send' });
    expect((await db.tusk.getJob(bulk.ids[599] as string))?.source).toEqual({
      type: 'Invoice',
      id: 'i599',
      method: null,
    });

    const seen: unknown[] = [];
    const worker = db.worker({
      queues: ['src'],
      tasks: { mail: (_: unknown, ctx: JobContext) => seen.push(ctx.job.source) },
    });
    await worker.start();
    await eventually(async () => (await db.rows(`SELECT 1 FROM $schema.jobs WHERE queue = 'src'`)).length === 0);
    await worker.stop();
    expect(seen).toContainEqual({ type: 'Invoice', id: '9', method: 'send' });
    const rows = await db.rows(
      `SELECT id::text, source_method FROM $schema.job_history WHERE source_type = 'Invoice' AND source_id = '9'`,
    );
    expect(rows.map((r) => r.id).sort()).toEqual([one.id, dedup.id].sort());
  });

  it('is checked', async () => {
    await expect(db.tusk.enqueue('mail', {}, { source: { type: 'Invoice' } as never })).rejects.toThrow(
      /^options\.source\.id: must be a string of 1 to 256 characters or an integer \(got undefined\)/,
    );
    await expect(db.tusk.enqueue('mail', {}, { source: { type: '', id: 1 } })).rejects.toThrow(
      /^options\.source\.type: must not be empty/,
    );
    await expect(db.tusk.enqueue('mail', {}, { source: { type: 'a', id: 1.5 } })).rejects.toThrow(
      'options.source.id: must be a string of 1 to 256 characters or an integer (got 1.5)',
    );
  });
});

describe('a Tusk with only classes registered', () => {
  it('makes workers without tasks', () => {
    const tusk = new Tusk({ connectionString: db.url, schema: db.schema, logger: false });
    expect(() => tusk.worker({})).toThrow(/no tasks/);
    tusk.register(DataReport, { load: DataReport.find, id: (r) => r.id });
    expect(tusk.worker({}).state).toBe('new');
    return tusk.close();
  });
});
