// Type-level tests of the typed task registry and the async call style. Checked by
// `npm run typecheck` (tsc over test/) and by vitest's typecheck: a `@ts-expect-error`
// line that stops being an error fails both.
import { describe, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  createServer,
  type DefinedTask,
  defineTask,
  type Enqueued,
  type FlowIds,
  type Job,
  type JobContext,
  Tusk,
  type TuskServer,
} from '../src/index.js';

const sendEmail = defineTask('send_email', {
  schema: z.object({ to: z.email(), subject: z.string(), retries: z.number().default(3) }),
  handler: async (payload, ctx) => {
    expectTypeOf(payload).toEqualTypeOf<{ to: string; subject: string; retries: number }>();
    expectTypeOf(ctx).toEqualTypeOf<JobContext>();
    return { messageId: 'x' };
  },
});
const resize = defineTask('resize', {
  handler: (payload: { url: string; width?: number }) => payload.width ?? 0,
  queue: 'images',
});
const ping = defineTask('ping', { handler: (payload: { at: number } | undefined) => payload?.at });
const tasks = [sendEmail, resize, ping];

class DataReport {
  static find(id: string): Promise<DataReport | null> {
    return Promise.resolve(new DataReport(id));
  }
  title = 'report';
  onDone: () => void = () => {};
  constructor(readonly id: string) {}
  execute(format: 'pdf' | 'csv', pages?: number): string {
    return `${this.id}.${format}.${pages ?? 0}`;
  }
  async send(to: { email: string; cc?: string[] }): Promise<void> {
    void to;
  }
  schedule(at: Date): void {
    void at;
  }
  notify(callback: () => void): void {
    callback();
  }
  tag(value: bigint): void {
    void value;
  }
}

describe('defineTask', () => {
  it('carries the name, the payload enqueue takes and the result', () => {
    expectTypeOf(sendEmail).toExtend<DefinedTask<'send_email'>>();
    expectTypeOf(sendEmail.name).toEqualTypeOf<'send_email'>();
    // with a schema, enqueue takes its input type: `retries` has a default, so it is optional there
    expectTypeOf(sendEmail).toExtend<
      DefinedTask<'send_email', { to: string; subject: string; retries?: number | undefined }, { messageId: string }>
    >();
    expectTypeOf(resize).toExtend<DefinedTask<'resize', { url: string; width?: number }, number>>();
  });

  it('types the handler by the schema output', () => {
    const schema = z.object({ n: z.number() });
    // @ts-expect-error the schema says n is a number
    defineTask('typed', { schema, handler: (payload: { n: string }) => payload.n });
    defineTask('typed', { schema, handler: (payload: { n: number }) => payload.n });
  });
});

describe('a Tusk with typed tasks', () => {
  const tusk = new Tusk({ tasks });

  it('checks task names and payloads', () => {
    expectTypeOf(tusk.enqueue('send_email', { to: 'a@b.c', subject: 'Hi' })).toEqualTypeOf<Promise<Enqueued>>();
    tusk.enqueue('resize', { url: 'x' }, { tenant: 'acme', delayMs: 10 });
    tusk.enqueue('ping');
    tusk.enqueue('ping', { at: 1 });

    // @ts-expect-error misspelled task name
    tusk.enqueue('send_emial', { to: 'a@b.c', subject: 'Hi' });
    // @ts-expect-error missing field
    tusk.enqueue('send_email', { to: 'a@b.c' });
    // @ts-expect-error wrong field type
    tusk.enqueue('resize', { url: 'x', width: '100' });
    // @ts-expect-error the payload is required when its type does not allow undefined
    tusk.enqueue('resize');
    // @ts-expect-error unknown option
    tusk.enqueue('resize', { url: 'x' }, { tennant: 'acme' });
    // @ts-expect-error a name only known at run time is not a task name of the list
    tusk.enqueue('resize' as string, {});
  });

  it('checks enqueueMany entries', () => {
    tusk.enqueueMany([
      { task: 'send_email', payload: { to: 'a@b.c', subject: 'Hi' }, tenant: 'acme' },
      { task: 'resize', payload: { url: 'x' } },
      { task: 'ping' },
    ]);
    // @ts-expect-error payload of another task
    tusk.enqueueMany([{ task: 'resize', payload: { to: 'a@b.c', subject: 'Hi' } }]);
    // @ts-expect-error misspelled task name
    tusk.enqueueMany([{ task: 'rezise', payload: { url: 'x' } }]);
  });

  it('checks the jobs of a flow, children included', () => {
    expectTypeOf(
      tusk.flow({
        task: 'send_email',
        payload: { to: 'a@b.c', subject: 'Hi' },
        children: [{ task: 'resize', payload: { url: 'x' }, children: [{ task: 'ping' }] }],
      }),
    ).toEqualTypeOf<Promise<FlowIds>>();
    tusk.enqueue('ping', undefined, { dependsOn: ['1', 2, 3n], onDependencyFailure: 'continue' });
    // @ts-expect-error payload of another task, in a child
    tusk.flow({ task: 'ping', children: [{ task: 'resize', payload: { to: 'a@b.c' } }] });
    // @ts-expect-error a flow's jobs are not deduplicated
    tusk.flow({ task: 'ping', dedupKey: 'k' });
    // @ts-expect-error not an option
    tusk.enqueue('ping', undefined, { dependsOn: ['1'], onDependencyFailure: 'skip' });
  });

  it('takes any task through untyped', () => {
    tusk.untyped.enqueue('legacy', { anything: true });
    tusk.untyped.enqueue('resize' as string);
    tusk.untyped.enqueueMany([{ task: 'legacy', payload: 1 }]);
    expectTypeOf(tusk.untyped).toEqualTypeOf<Tusk>();
  });

  it('types getJob: a union by task name, narrowed by job.task to its payload and result', async () => {
    const job = await tusk.getJob('1');
    if (job?.task === 'send_email') {
      expectTypeOf(job.payload).toEqualTypeOf<{ to: string; subject: string; retries?: number | undefined }>();
      expectTypeOf(job.result).toEqualTypeOf<{ messageId: string } | null>();
    }
    if (job?.task === 'resize') {
      expectTypeOf(job.payload).toEqualTypeOf<{ url: string; width?: number }>();
      expectTypeOf(job.result).toEqualTypeOf<number | null>();
      // @ts-expect-error a resize payload has no subject
      void job.payload.subject;
    }
    expectTypeOf(job?.task).toEqualTypeOf<'send_email' | 'resize' | 'ping' | undefined>();
    // @ts-expect-error not a task of the list
    if (job?.task === 'send_emial') void job;
    expectTypeOf(await tusk.untyped.getJob('1')).toEqualTypeOf<Job | null>();
  });

  it('gives the list to workers', () => {
    tusk.worker({ tasks: [sendEmail, resize], concurrency: 4 });
    tusk.worker({ tasks: { legacy: (payload: { n: number }) => payload.n } });
  });

  it('is the type Tusk<typeof tasks>, and passes where a Tusk is expected', () => {
    expectTypeOf(tusk).toEqualTypeOf<Tusk<typeof tasks>>();
    const take = (t: Tusk) => t;
    take(tusk);
  });

  it('is served by createServer', () => {
    expectTypeOf(createServer).toBeCallableWith(tusk, { auth: 'none' });
    expectTypeOf(createServer).returns.toEqualTypeOf<Promise<TuskServer>>();
  });
});

describe('an untyped Tusk', () => {
  it('takes any task name and payload, the payload optional', () => {
    const tusk = new Tusk();
    expectTypeOf(tusk).toEqualTypeOf<Tusk>();
    tusk.enqueue('anything', { a: 1 });
    tusk.enqueue('anything');
    tusk.enqueue('x' as string, 42, { queue: 'q' });
    tusk.enqueueMany([{ task: 'x', payload: [1] }, { task: 'y' }]);
  });

  it('reads jobs as Job (any task, unknown payload and result)', async () => {
    const tusk = new Tusk();
    const job = await tusk.getJob('1');
    expectTypeOf(job?.payload).toEqualTypeOf<unknown>();
    expectTypeOf(job?.task).toEqualTypeOf<string | undefined>();
  });

  it('stays untyped with a tasks object', () => {
    const tusk = new Tusk({ tasks: { a: (p: { n: number }) => p.n, b: { queue: 'q' } } });
    expectTypeOf(tusk).toEqualTypeOf<Tusk>();
    tusk.enqueue('c', 'anything');
  });
});

describe('tusk.async', () => {
  const tusk = new Tusk();
  tusk.register(DataReport, { load: (id) => DataReport.find(id), id: (r) => r.id });
  const report = new DataReport('42');

  it('calls methods with their own argument types, resolving with the job id', () => {
    expectTypeOf(tusk.async(report).execute('pdf', 2)).toEqualTypeOf<Promise<Enqueued>>();
    tusk.async(report).execute('csv');
    tusk.async(report).send({ email: 'a@b.c', cc: ['d@e.f'] });
    tusk.async(report, { tenant: 'acme', queue: 'reports', delayMs: 1000 }).execute('pdf');
  });

  it('refuses wrong methods, arguments and options', () => {
    // @ts-expect-error no such method
    tusk.async(report).exeucte('pdf');
    // @ts-expect-error a field, not a method
    tusk.async(report).title;
    // @ts-expect-error wrong argument type
    tusk.async(report).execute('doc');
    // @ts-expect-error missing argument
    tusk.async(report).execute();
    // @ts-expect-error too many arguments
    tusk.async(report).execute('pdf', 1, 2);
    // @ts-expect-error unknown option
    tusk.async(report, { tennant: 'acme' });
    // @ts-expect-error the source is the instance
    tusk.async(report, { source: { type: 'X', id: 1 } });
  });

  it('refuses arguments that are not JSON data', () => {
    // @ts-expect-error a Date would arrive as a string
    tusk.async(report).schedule(new Date());
    // @ts-expect-error a function cannot be sent
    tusk.async(report).notify(() => {});
    // @ts-expect-error a BigInt cannot be sent
    tusk.async(report).tag(1n);
  });

  it('types register: load and id see the class', () => {
    tusk.register(DataReport, {
      load: (id, ctx) => {
        expectTypeOf(id).toEqualTypeOf<string>();
        expectTypeOf(ctx.job.source).toEqualTypeOf<{ type: string; id: string; method: string | null } | null>();
        return DataReport.find(id);
      },
      id: (r) => {
        expectTypeOf(r).toEqualTypeOf<DataReport>();
        return r.id;
      },
    });
    // @ts-expect-error load must give a DataReport
    tusk.register(DataReport, { load: (id: string) => ({ id }), id: (r) => r.id });
  });
});
