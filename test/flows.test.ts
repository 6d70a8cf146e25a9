// Flows: jobs that wait for others (dependsOn, tusk.flow), exact under concurrency.
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type FlowSpec, type Job, type JobContext, TuskValidationError } from '../src/index.js';
import { eventually, useSessions, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
/** A connection of its own, for transactions held open across steps. */
const session = useSessions(() => db.url, true);

const finished = async (id: string, timeoutMs = 30_000): Promise<Job> =>
  (await eventually(async () => {
    const job = await db.tusk.getJob(id);
    return job?.finishedAt ? job : null;
  }, timeoutMs)) as Job;

/** Finished at, and started at, of jobs in history, by id. */
async function times(ids: readonly string[]): Promise<Map<string, { started: Date; finished: Date }>> {
  const rows = await db.rows<{ id: string; started_at: Date; finished_at: Date }>(
    'SELECT id::text, started_at, finished_at FROM $schema.job_history WHERE id = ANY($1::bigint[])',
    [ids],
  );
  return new Map(rows.map((r) => [r.id, { started: r.started_at, finished: r.finished_at }]));
}

const counts = async () =>
  (
    await db.rows<{ jobs: number; history: number; deps: number }>(
      `SELECT (SELECT count(*)::int FROM $schema.jobs) AS jobs, (SELECT count(*)::int FROM $schema.job_history) AS history,
              (SELECT count(*)::int FROM $schema.job_deps) AS deps`,
    )
  )[0];

/** A flow of `depth` jobs, each the only child of the one above. */
function chain(depth: number): FlowSpec {
  let node: FlowSpec = { task: 'link', queue: 'chain' };
  for (let i = 1; i < depth; i++) node = { task: 'link', queue: 'chain', children: [node] };
  return node;
}

/** Waits until `pid` waits for a lock (so the interleaving a test forces has happened). */
const waitsForLock = (pid: number) =>
  eventually(
    async () =>
      (await db.rows(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [pid])).length > 0,
    10_000,
    10,
  );

/** The server process of a session (known from its connection: asking would queue behind its query). */
const pidOf = (c: pg.Client) => (c as unknown as { processID: number }).processID;

describe('a flow of 1 parent and 100 children', () => {
  it('runs the parent once, after the last child, with their 100 results in order (other queue, other tenant)', async () => {
    const parentRuns: string[] = [];
    const tasks = {
      child: async ({ n }: { n: number }) => {
        await new Promise((r) => setTimeout(r, n % 7));
        return { n };
      },
      parent: async (_p: unknown, ctx: JobContext) => {
        parentRuns.push(ctx.job.id);
        const deps = await ctx.dependencies();
        return { states: [...new Set(deps.map((d) => d.state))], ns: deps.map((d) => (d.result as { n: number }).n) };
      },
    };
    const { id, children } = await db.tusk.flow({
      task: 'parent',
      queue: 'flow-parents',
      tenant: 'assembler',
      children: Array.from({ length: 100 }, (_, n) => ({ task: 'child', payload: { n }, queue: 'flow-children' })),
    });
    expect(children).toHaveLength(100);
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'scheduled', waitingOn: 100 });
    expect((await db.tusk.getJob(id))?.dependsOn).toEqual(children.map((c) => c.id));
    // two workers, so that children finish in parallel batches
    const workers = [0, 1].map(() =>
      db.worker({ queues: ['flow-children', 'flow-parents'], concurrency: 8, tasks, batchSize: 7 }),
    );
    await Promise.all(workers.map((w) => w.start()));
    const parent = await finished(id);
    await Promise.all(workers.map((w) => w.stop()));

    expect(parent.state).toBe('succeeded');
    expect(parentRuns).toEqual([id]);
    expect(parent.attempts).toBe(1);
    expect(parent.result).toEqual({ states: ['succeeded'], ns: Array.from({ length: 100 }, (_, n) => n) });
    const t = await times([id, ...children.map((c) => c.id)]);
    const lastChild = Math.max(...children.map((c) => t.get(c.id)?.finished.getTime() ?? Number.POSITIVE_INFINITY));
    expect(t.get(id)?.started.getTime()).toBeGreaterThan(lastChild);
    expect((await counts())?.deps).toBe(0);
  });

  it('the same with dependsOn, the parent enqueued while its children are being finished', async () => {
    let parentRuns = 0;
    const worker = db.worker({
      queues: ['dep-children', 'dep-parents'],
      concurrency: 10,
      batchSize: 5,
      tasks: {
        child: async ({ n }: { n: number }) => ({ n }),
        parent: async (_p: unknown, ctx) => {
          parentRuns++;
          return (await ctx.dependencies()).map((d) => (d.result as { n: number }).n);
        },
      },
    });
    await worker.start();
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 100 }, (_, n) => ({ task: 'child', payload: { n }, queue: 'dep-children' })),
    );
    // some are done, some running, some waiting
    await eventually(
      async () => (await db.rows('SELECT 1 FROM $schema.job_history WHERE id = ANY($1::bigint[])', [ids])).length >= 10,
      10_000,
      2,
    );
    const { id } = await db.tusk.enqueue('parent', null, { queue: 'dep-parents', dependsOn: ids });
    const parent = await finished(id);
    await worker.stop();
    expect(parent.state).toBe('succeeded');
    expect(parentRuns).toBe(1);
    expect(parent.result).toEqual(Array.from({ length: 100 }, (_, n) => n));
    const t = await times([id, ...ids]);
    expect(t.get(id)?.started.getTime()).toBeGreaterThan(
      Math.max(...ids.map((c) => t.get(c)?.finished.getTime() ?? 0)),
    );
  });

  it('an isolated handler (a thread of its own) reads its dependencies too', async () => {
    const worker = db.worker({
      queues: ['isolated-flow'],
      tasks: {
        leaf: ({ n }: { n: number }) => n * 10,
        gather: { isolate: { module: new URL('./fixtures/isolated.mjs', import.meta.url), export: 'gather' } },
      },
    });
    const root = await db.tusk.flow({
      task: 'gather',
      queue: 'isolated-flow',
      children: [1, 2, 3].map((n) => ({ task: 'leaf', payload: { n }, queue: 'isolated-flow' })),
    });
    await worker.start();
    const job = await finished(root.id);
    await worker.stop();
    expect(job.result).toEqual({ dependsOn: root.children.map((c) => c.id), results: [10, 20, 30], inThread: true });
  });
});

describe('a dependency that fails', () => {
  it('cancels its dependents by default, and theirs up the tree; the others run', async () => {
    const ran: string[] = [];
    const worker = db.worker({
      queues: ['fail'],
      tasks: {
        ok: () => 'ok',
        boom: () => {
          throw new Error('boom');
        },
        never: (_p: unknown, ctx) => {
          ran.push(ctx.job.id);
        },
      },
    });
    const root = await db.tusk.flow({
      task: 'never',
      queue: 'fail',
      children: [
        {
          task: 'never',
          queue: 'fail',
          children: [
            { task: 'ok', queue: 'fail' },
            { task: 'boom', queue: 'fail', maxAttempts: 1 },
          ],
        },
        { task: 'ok', queue: 'fail' },
      ],
    });
    await worker.start();
    const top = await finished(root.id);
    const [middle, sibling] = root.children;
    const [okChild, boom] = middle?.children ?? [];
    for (const job of [okChild, sibling]) expect((await finished(job?.id as string)).state).toBe('succeeded');
    await worker.stop();
    expect((await db.tusk.getJob(boom?.id as string))?.state).toBe('dead');
    const mid = await db.tusk.getJob(middle?.id as string);
    expect(mid).toMatchObject({ state: 'cancelled', attempts: 0 });
    expect(mid?.error).toMatchObject({
      name: 'DependencyFailedError',
      message: `job ${boom?.id}, which it depends on, ended dead`,
    });
    expect(top.state).toBe('cancelled');
    expect(top.error?.message).toBe(`job ${middle?.id}, which it depends on, ended cancelled`);
    expect(ran).toEqual([]);
    expect((await counts())?.deps).toBe(0);
  });

  it("with onDependencyFailure: 'continue', the dependent runs once they have all ended and sees the failure", async () => {
    const worker = db.worker({
      queues: ['cont'],
      tasks: {
        ok: () => 'ok',
        boom: () => {
          throw new Error('boom');
        },
        sum: async (_p: unknown, ctx) => (await ctx.dependencies()).map((d) => [d.state, d.result]),
      },
    });
    const root = await db.tusk.flow({
      task: 'sum',
      queue: 'cont',
      onDependencyFailure: 'continue',
      children: [
        { task: 'boom', queue: 'cont', maxAttempts: 1 },
        { task: 'ok', queue: 'cont' },
      ],
    });
    await worker.start();
    const job = await finished(root.id);
    await worker.stop();
    expect(job.state).toBe('succeeded');
    expect(job.result).toEqual([
      ['dead', null],
      ['succeeded', 'ok'],
    ]);
  });

  it('cancelling a waiting job cancels what depends on it; an expired one too', async () => {
    const { id: a } = await db.tusk.enqueue('x', null, { queue: 'idle' });
    const { id: b } = await db.tusk.enqueue('x', null, { queue: 'idle', dependsOn: [a] });
    const { id: c } = await db.tusk.enqueue('x', null, { queue: 'idle', dependsOn: [b] });
    expect(await db.tusk.cancel(b)).toBe('cancelled');
    expect((await db.tusk.getJob(c))?.state).toBe('cancelled');
    expect((await db.tusk.getJob(a))?.state).toBe('available');
    // expiresAt passes while it waits: expired, and its dependent cancelled
    const { id: d } = await db.tusk.enqueue('x', null, {
      queue: 'idle',
      dependsOn: [a],
      expiresAt: new Date(Date.now() + 50),
    });
    const { id: e } = await db.tusk.enqueue('x', null, { queue: 'idle', dependsOn: [d] });
    await new Promise((r) => setTimeout(r, 80));
    await db.rows('SELECT $schema.expire_jobs()');
    expect((await db.tusk.getJob(d))?.state).toBe('expired');
    expect(await db.tusk.getJob(e)).toMatchObject({
      state: 'cancelled',
      error: { message: `job ${d}, which it depends on, ended expired` },
    });
    expect(await db.tusk.cancel(a)).toBe('cancelled');
    expect((await counts())?.deps).toBe(0);
  });
});

describe('dependencies at enqueue', () => {
  it('of a succeeded job count as done; of a dead or cancelled job apply the option at once', async () => {
    const { id: done } = await db.tusk.enqueue('x', null, { queue: 'settled' });
    const [lease] = await db.tusk.fetch({ queue: 'settled' });
    await db.tusk.ack(lease as { id: string; token: string }, 41);
    const { id: gone } = await db.tusk.enqueue('x', null, { queue: 'settled' });
    await db.tusk.cancel(gone);

    const { id: now } = await db.tusk.enqueue('y', null, { queue: 'settled', dependsOn: [done] });
    expect(await db.tusk.getJob(now)).toMatchObject({ state: 'available', waitingOn: 0, dependsOn: [done] });
    const { id: cancelled } = await db.tusk.enqueue('y', null, { queue: 'settled', dependsOn: [done, gone] });
    expect(await db.tusk.getJob(cancelled)).toMatchObject({
      state: 'cancelled',
      error: { name: 'DependencyFailedError', message: `job ${gone}, which it depends on, ended cancelled` },
    });
    const { id: goesOn } = await db.tusk.enqueue('y', null, {
      queue: 'settled',
      dependsOn: [BigInt(gone), Number(done)],
      onDependencyFailure: 'continue',
    });
    expect(await db.tusk.getJob(goesOn)).toMatchObject({ state: 'available', dependsOn: [gone, done] });
    // a later runAt still holds: scheduled, not waiting
    const { id: later } = await db.tusk.enqueue('y', null, { queue: 'settled', dependsOn: [done], delayMs: 60_000 });
    expect(await db.tusk.getJob(later)).toMatchObject({ state: 'scheduled', waitingOn: 0 });
    for (const id of [now, goesOn, later]) await db.tusk.cancel(id);
  });

  it('a waiting job is never claimed nor promoted, and wakes no idle worker', async () => {
    const { id: first } = await db.tusk.enqueue('x', null, { queue: 'hold' });
    const { id: waiting } = await db.tusk.enqueue('y', null, { queue: 'hold-w', dependsOn: [first] });
    expect(await db.rows('SELECT $schema.promote_due_jobs() AS n')).toEqual([{ n: 0 }]);
    expect(await db.rows(`SELECT id FROM $schema.claim_jobs(NULL, 10, 1000, ARRAY['hold-w'])`)).toEqual([]);
    expect(await db.rows(`SELECT $schema.next_due_in_ms() AS ms`)).toEqual([{ ms: null }]);
    expect(await db.tusk.getJob(waiting)).toMatchObject({ state: 'scheduled', waitingOn: 1 });
    await db.tusk.cancel(first);
    await db.tusk.cancel(waiting);
  });

  it('an unknown id, or bad input, is refused naming the field, and nothing is written', async () => {
    const { id: real } = await db.tusk.enqueue('x', null, { queue: 'refused' });
    const before = await counts();
    const refused = async (p: Promise<unknown>, field: string, message: RegExp) => {
      const error = await p.then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(TuskValidationError);
      expect((error as TuskValidationError).field).toBe(field);
      expect((error as Error).message).toMatch(message);
    };
    const unknown = '9000000000000000000';
    await refused(
      db.tusk.enqueue('y', null, { dependsOn: [real, unknown] }),
      'options.dependsOn[1]',
      /^options\.dependsOn\[1\]: is not a job: no job has id 9000000000000000000/,
    );
    await refused(
      db.tusk.enqueueMany([{ task: 'y', dependsOn: [real] }, { task: 'y' }, { task: 'y', dependsOn: [unknown] }]),
      'jobs[2].dependsOn[0]',
      /is not a job/,
    );
    await refused(
      db.tusk.flow({ task: 'p', children: [{ task: 'c' }, { task: 'c', dependsOn: [real, real, unknown] }] }),
      'flow.children[1].dependsOn[2]',
      /is not a job/,
    );
    await refused(db.tusk.enqueue('y', null, { dependsOn: ['abc'] }), 'options.dependsOn.0', /must be a job id/);
    await refused(db.tusk.enqueue('y', null, { dependsOn: [0] }), 'options.dependsOn.0', /must be a job id/);
    await refused(db.tusk.enqueue('y', null, { dependsOn: real as never }), 'options.dependsOn', /array of job ids/);
    await refused(db.tusk.enqueue('y', null, { dependsOn: [real], dedupKey: 'k' }), 'options', /not deduplicated/);
    await refused(
      db.tusk.enqueue('y', null, { dependsOn: [real], debounce: { key: 'k', delayMs: 10 } }),
      'options',
      /not deduplicated nor debounced/,
    );
    await refused(db.tusk.enqueue('y', null, { onDependencyFailure: 'continue' }), 'options', /give dependsOn/);
    await refused(
      db.tusk.enqueue('y', null, { dependsOn: [real], onDependencyFailure: 'skip' as never }),
      'options.onDependencyFailure',
      /'cancel' or 'continue'/,
    );
    await refused(
      db.tusk.enqueueMany([
        { task: 'y', dependsOn: [real] },
        { task: 'y', dedupKey: 'k' },
      ]),
      'jobs[1]',
      /separate calls/,
    );
    await refused(
      db.tusk.flow({ task: 'p', children: [{ task: 'c', dedupKey: 'k' } as never] }),
      'flow.children[0].dedupKey',
      /does not apply/,
    );
    await refused(
      db.tusk.flow({ task: 'p', children: [{ task: 'c', onDependencyFailure: 'continue' }] }),
      'flow.children[0].onDependencyFailure',
      /children or dependsOn/,
    );
    await refused(db.tusk.flow({ task: 'p', children: [{ task: '' }] }), 'flow.children[0].task', /empty/);
    await refused(db.tusk.flow(chain(501)), `flow${'.children[0]'.repeat(500)}`, /at most 500 levels/);
    await refused(db.tusk.flow({ task: 'p', children: 'c' as never }), 'flow.children', /array of jobs/);
    await refused(
      db.tusk.stage(db.pool, 'y', null, { dependsOn: [real] } as never),
      'options',
      /unknown option "dependsOn"/,
    );
    expect(await counts()).toEqual(before);
  });

  it('a flow 500 levels deep: a chain, each job waiting for the one below', async () => {
    const top = await db.tusk.flow(chain(500));
    const ids: string[] = [];
    for (let node = top; node; node = node.children[0] as typeof top) ids.push(node.id);
    expect(ids).toHaveLength(500);
    const leaf = ids.at(-1) as string;
    expect(await db.tusk.getJob(leaf)).toMatchObject({ state: 'available', waitingOn: 0 });
    expect(await db.tusk.getJob(top.id)).toMatchObject({ state: 'scheduled', waitingOn: 1, dependsOn: [ids[1]] });
    // a failure at the bottom cancels the whole chain, in one loop
    await db.tusk.cancel(leaf);
    expect(await db.tusk.getJob(top.id)).toMatchObject({ state: 'cancelled' });
    expect(await db.rows(`SELECT id FROM $schema.jobs WHERE queue = 'chain'`)).toEqual([]);
  });

  it('works across tenants and queues, limited tenants included', async () => {
    await db.tusk.tenants.set('flow-limited', { slots: 1 });
    const worker = db.worker({
      queues: ['t-a', 't-b'],
      tasks: {
        make: () => ({ made: true }),
        use: async (_p: unknown, ctx) => (await ctx.dependencies()).map((d) => [d.tenant, d.queue, d.result]),
      },
    });
    const { id: a } = await db.tusk.enqueue('make', null, { tenant: 'flow-a', queue: 't-a', delayMs: 200 });
    const { id: b } = await db.tusk.enqueue('use', null, { tenant: 'flow-limited', queue: 't-b', dependsOn: [a] });
    await worker.start();
    const job = await finished(b);
    await worker.stop();
    expect(job.state).toBe('succeeded');
    expect(job.result).toEqual([['flow-a', 't-a', { made: true }]]);
  });

  it('a retried dependent waits for its dependencies again', async () => {
    const { id: a } = await db.tusk.enqueue('x', null, { queue: 'retry-flow' });
    const { id: b } = await db.tusk.enqueue('x', null, { queue: 'retry-flow' });
    const { id: c } = await db.tusk.enqueue('y', null, { queue: 'retry-flow-2', dependsOn: [a, b] });
    await db.tusk.cancel(a);
    expect((await db.tusk.getJob(c))?.state).toBe('cancelled');
    // retried while its dependency is still cancelled: cancelled again at once
    expect(await db.tusk.retry(c)).toBe(true);
    expect((await db.tusk.getJob(c))?.state).toBe('cancelled');
    // the dependency retried first: the dependent waits for both
    expect(await db.tusk.retry(a)).toBe(true);
    expect(await db.tusk.retry(c)).toBe(true);
    expect(await db.tusk.getJob(c)).toMatchObject({ state: 'scheduled', waitingOn: 2, dependsOn: [a, b] });
    for (const id of [a, b]) {
      const [lease] = await db.tusk.fetch({ queue: 'retry-flow' });
      expect(lease?.id).toBe(id);
      await db.tusk.ack(lease as { id: string; token: string });
    }
    expect(await db.tusk.getJob(c)).toMatchObject({ state: 'available', waitingOn: 0 });
    const [leased] = await db.tusk.fetch({ queue: 'retry-flow-2' });
    expect(leased).toMatchObject({ id: c, dependsOn: [a, b] });
  });
});

describe('a batch of completions', () => {
  it("releases the dependents of its smallest and largest ids, the outcomes in any order, and no one else's", async () => {
    const { ids } = await db.tusk.enqueueMany(Array.from({ length: 6 }, () => ({ task: 'c', queue: 'edges' })));
    const [first, , , , last, outside] = ids as [string, string, string, string, string, string];
    const { id: onFirst } = await db.tusk.enqueue('p', null, { queue: 'edges-p', dependsOn: [first] });
    const { id: onLast } = await db.tusk.enqueue('p', null, { queue: 'edges-p', dependsOn: [last] });
    const { id: onOutside } = await db.tusk.enqueue('p', null, { queue: 'edges-p', dependsOn: [outside] });
    const leases = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id::text, lease_token::text FROM $schema.claim_jobs(NULL, 6, 60000, ARRAY['edges'])`,
    );
    expect(leases).toHaveLength(6);
    // all but the last enqueued, its largest id first and its smallest last
    const batch = leases.filter((l) => l.id !== outside).sort((a, b) => (BigInt(b.id) > BigInt(a.id) ? 1 : -1));
    const [finished] = await db.rows<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.finish_jobs('succeeded', $1::jsonb)`,
      [JSON.stringify(batch.map((l) => ({ id: l.id, token: l.lease_token })))],
    );
    expect(finished?.n).toBe(5);
    expect(await db.tusk.getJob(onFirst)).toMatchObject({ state: 'available', waitingOn: 0 });
    expect(await db.tusk.getJob(onLast)).toMatchObject({ state: 'available', waitingOn: 0 });
    expect(await db.tusk.getJob(onOutside)).toMatchObject({ state: 'scheduled', waitingOn: 1 });
    const rest = leases.find((l) => l.id === outside);
    await db.rows(`SELECT count(*) FROM $schema.finish_jobs('succeeded', $1::jsonb)`, [
      JSON.stringify([{ id: outside, token: rest?.lease_token }]),
    ]);
    expect(await db.tusk.getJob(onOutside)).toMatchObject({ state: 'available', waitingOn: 0 });
  });
});

describe('under concurrency', () => {
  it('the last two children finishing at once release the parent exactly once', async () => {
    const flow = await db.tusk.flow({
      task: 'p',
      queue: 'race-p',
      children: [
        { task: 'c', queue: 'race-c' },
        { task: 'c', queue: 'race-c' },
      ],
    });
    const leases = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id::text, lease_token::text FROM $schema.claim_jobs(NULL, 2, 60000, ARRAY['race-c'])`,
    );
    expect(leases).toHaveLength(2);
    const [one, two] = [await session(), await session()];
    const finish = (c: pg.Client, l: { id: string; lease_token: string }) =>
      c.query(`SELECT * FROM "${db.schema}".finish_jobs('succeeded', $1::jsonb)`, [
        JSON.stringify([{ id: l.id, token: l.lease_token, result: l.id }]),
      ]);
    await one.query('BEGIN');
    await finish(one, leases[0] as { id: string; lease_token: string });
    // the second finishes while the first has counted the parent down and not committed:
    // it waits for the parent's row, then counts from what the first committed
    const second = finish(two, leases[1] as { id: string; lease_token: string });
    await waitsForLock(pidOf(two));
    await one.query('COMMIT');
    await second;
    expect(await db.tusk.getJob(flow.id)).toMatchObject({ state: 'available', waitingOn: 0 });
    const claims = await Promise.all(
      [0, 1, 2].map(() => db.rows(`SELECT id::text FROM $schema.claim_jobs(NULL, 5, 60000, ARRAY['race-p'])`)),
    );
    expect(claims.flat()).toEqual([{ id: flow.id }]);
  });

  it('a dependency finishing while the dependent is enqueued: each order releases it exactly once', async () => {
    for (const first of ['finish', 'enqueue'] as const) {
      const { id: dep } = await db.tusk.enqueue('c', null, { queue: `order-${first}` });
      const [lease] = await db.rows<{ id: string; lease_token: string }>(
        `SELECT id::text, lease_token::text FROM $schema.claim_jobs(NULL, 1, 60000, ARRAY['order-${first}'])`,
      );
      const [finisher, enqueuer] = [await session(), await session()];
      const finish = () =>
        finisher.query(`SELECT * FROM "${db.schema}".finish_jobs('succeeded', $1::jsonb)`, [
          JSON.stringify([{ id: dep, token: lease?.lease_token }]),
        ]);
      let dependent: Promise<{ id: string }>;
      if (first === 'finish') {
        // the finish has deleted the dependency, not committed: the enqueue waits, then
        // finds it in history (succeeded) and makes the job available at once
        await finisher.query('BEGIN');
        await finish();
        dependent = db.tusk.enqueue('p', null, { queue: `order-${first}-p`, dependsOn: [dep], client: enqueuer });
        await waitsForLock(pidOf(enqueuer));
        await finisher.query('COMMIT');
      } else {
        // the enqueue holds the dependency (not committed): the finish waits, then sees the edge
        await enqueuer.query('BEGIN');
        dependent = db.tusk.enqueue('p', null, { queue: `order-${first}-p`, dependsOn: [dep], client: enqueuer });
        await dependent;
        const finished = finish();
        await waitsForLock(pidOf(finisher));
        await enqueuer.query('COMMIT');
        await finished;
      }
      const { id } = await dependent;
      expect(await db.tusk.getJob(id)).toMatchObject({ state: 'available', waitingOn: 0, dependsOn: [dep] });
      await db.tusk.cancel(id);
    }
    expect((await counts())?.deps).toBe(0);
  });

  it('an enqueue waiting for one held dependency holds none of the others meanwhile (no deadlock with a finishing batch)', async () => {
    const { ids } = await db.tusk.enqueueMany([
      { task: 'c', queue: 'hold-none' },
      { task: 'c', queue: 'hold-none' },
    ]);
    const [low, high] = ids as [string, string];
    const leases = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id::text, lease_token::text FROM $schema.claim_jobs(NULL, 2, 60000, ARRAY['hold-none'])`,
    );
    const token = (id: string) => leases.find((l) => l.id === id)?.lease_token;
    const [batch, enqueuer] = [await session(), await session()];
    // a finishing batch that has deleted the higher id first, and will delete the lower one next
    await batch.query('BEGIN');
    await batch.query(`SELECT * FROM "${db.schema}".finish_jobs('succeeded', $1::jsonb)`, [
      JSON.stringify([{ id: high, token: token(high) }]),
    ]);
    const dependent = db.tusk.enqueue('p', null, { queue: 'hold-none-p', dependsOn: [low, high], client: enqueuer });
    await waitsForLock(pidOf(enqueuer));
    // the enqueue waits for `high` holding nothing: the batch deletes `low` without waiting
    await batch.query(`SET lock_timeout = '5s'`);
    await batch.query(`SELECT * FROM "${db.schema}".finish_jobs('succeeded', $1::jsonb)`, [
      JSON.stringify([{ id: low, token: token(low) }]),
    ]);
    await batch.query('COMMIT');
    const { id } = await dependent;
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'available', waitingOn: 0, dependsOn: [low, high] });
  });
});
