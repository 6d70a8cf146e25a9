import type { StandardSchemaV1 } from '@standard-schema/spec';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTask, type Job, Tusk, TuskValidationError } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const finished = (tusk: Tusk, id: string) =>
  eventually(async () => {
    const job = await tusk.getJob(id);
    return job && ['succeeded', 'dead', 'cancelled', 'expired'].includes(job.state) ? job : null;
  });

const orderSchema = z.object({
  customer: z.string().min(1),
  items: z.array(z.object({ sku: z.string(), qty: z.number().int().positive() })).min(1),
  note: z.string().default('none'),
});

/** Handler calls, to prove which jobs reached a handler. */
const calls: unknown[] = [];

const placeOrder = defineTask('place_order', {
  schema: orderSchema,
  queue: 'orders',
  tenant: 'shop',
  handler: (order) => {
    calls.push(order);
    return { lines: order.items.length, note: order.note };
  },
});
const add = defineTask('add', { handler: (p: { a: number; b: number }) => p.a + p.b, queue: 'orders' });

/** A Standard Schema validator written by hand (no library): an even integer. */
const even: StandardSchemaV1<number, number> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: (value) =>
      Number.isInteger(value) && (value as number) % 2 === 0
        ? { value: value as number }
        : { issues: [{ message: 'must be an even integer', path: [] }] },
  },
};
/** The same, answering asynchronously (as schemas with async refinements do). */
const evenLater: StandardSchemaV1<number, number> = {
  '~standard': { ...even['~standard'], validate: async (value) => even['~standard'].validate(value) },
};
const half = defineTask('half', { schema: even, handler: (n) => n / 2, queue: 'orders' });
const halfLater = defineTask('half_later', { schema: evenLater, handler: (n) => n / 2, queue: 'orders' });

const jobCount = async (task: string) =>
  (await db.rows<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.jobs WHERE task = $1`, [task]))[0]?.n;

describe('typed tasks', () => {
  const tusk = db.another({ tasks: [placeOrder, add, half, halfLater] });

  it('enqueues and runs typed tasks; the handler gets the schema output; task defaults apply', async () => {
    const worker = db.worker({ queues: ['orders'] }, tusk);
    await worker.start();
    const order = await tusk.enqueue('place_order', { customer: 'c1', items: [{ sku: 'a', qty: 2 }] });
    const sum = await tusk.enqueue('add', { a: 2, b: 3 }, { tenant: 'acme' });
    const [o, s] = await Promise.all([finished(tusk, order.id), finished(tusk, sum.id)]);
    await worker.stop();
    expect(o).toMatchObject({
      task: 'place_order',
      tenant: 'shop',
      queue: 'orders',
      state: 'succeeded',
      payload: { customer: 'c1', items: [{ sku: 'a', qty: 2 }] }, // stored as given
      result: { lines: 1, note: 'none' }, // the handler saw the default filled in
      source: null,
    });
    expect(s).toMatchObject({ tenant: 'acme', state: 'succeeded', result: 5 });
  });

  it('refuses a payload its schema refuses at enqueue, listing every bad field with its path; nothing written', async () => {
    const bad = {
      customer: '',
      items: [
        { sku: 'a', qty: 1 },
        { sku: 'b', qty: 0 },
      ],
    };
    const error = await tusk.enqueue('place_order', bad).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TuskValidationError);
    const e = error as TuskValidationError;
    expect(e.field).toBe('payload');
    expect(e.message).toMatch(/^payload: does not match the schema of task "place_order": payload\.customer: /);
    expect(e.message).toMatch(/; payload\.items\[1\]\.qty: /);
    expect(e.issues.map((i) => i.path)).toEqual(['payload.customer', 'payload.items[1].qty']);
    expect(await jobCount('place_order')).toBe(0);

    const many = await tusk
      .enqueueMany([
        { task: 'add', payload: { a: 1, b: 1 } },
        { task: 'place_order', payload: { customer: 'c', items: [{ sku: 'x', qty: 1 }] } },
        { task: 'place_order', payload: { customer: 'c', items: [] } },
      ])
      .catch((x: unknown) => x);
    expect(many).toBeInstanceOf(TuskValidationError);
    expect((many as TuskValidationError).issues).toEqual([
      { path: 'jobs[2].payload.items', message: expect.stringMatching(/>=1|at least 1/i) },
    ]);
    expect(await jobCount('place_order')).toBe(0);
    expect(await jobCount('add')).toBe(0);
  });

  it('validates as the worker will see the payload: as JSON (a Date is a string there)', async () => {
    const at = defineTask('at', { schema: z.object({ when: z.date() }) });
    const strict = db.another({ tasks: [at] });
    await expect(strict.enqueue('at', { when: new Date() })).rejects.toThrow(
      /^payload: does not match the schema of task "at": payload\.when: .*expected date, received string/,
    );
  });

  it('validates with a schema given in a tasks object too (untyped)', async () => {
    const plain = db.another({ tasks: { count: { schema: z.object({ n: z.int() }), queue: 'orders' } } });
    await expect(plain.enqueue('count', { n: 1.5 })).rejects.toThrow(
      /^payload: does not match the schema of task "count": payload\.n: /,
    );
    expect((await plain.enqueue('count', { n: 2 })).id).toMatch(/^\d+$/);
  });

  it('takes any Standard Schema validator, synchronous or not', async () => {
    await expect(tusk.enqueue('half', 3)).rejects.toThrow(
      'payload: does not match the schema of task "half": payload: must be an even integer',
    );
    await expect(tusk.enqueue('half_later', 3)).rejects.toThrow(/must be an even integer/);
    const worker = db.worker({ queues: ['orders'] }, tusk);
    await worker.start();
    const ids = await Promise.all([tusk.enqueue('half', 8), tusk.enqueue('half_later', 10)]);
    const jobs = await Promise.all(ids.map(({ id }) => finished(tusk, id)));
    await worker.stop();
    expect(jobs.map((j) => j?.result)).toEqual([4, 5]);
  });

  it('validates again in the worker: a payload the schema refuses ends dead at once, its handler never called', async () => {
    // written by a producer that does not check the schema: SQL (another language, an
    // older deploy); a library producer would apply the definition the worker recorded
    const [{ id } = { id: '' }] = await db.rows<{ id: string }>(
      `SELECT $schema.enqueue_job('place_order', '{"customer": "c2", "items": "none"}', '{"queue": "orders"}')::text AS id`,
    );
    calls.length = 0;
    const worker = db.worker({ queues: ['orders'] }, tusk);
    await worker.start();
    const job = (await finished(tusk, id)) as Job;
    await worker.stop();
    expect(job).toMatchObject({ state: 'dead', attempts: 1, maxAttempts: 5 });
    expect(job.error).toMatchObject({
      name: 'TuskValidationError',
      message: expect.stringMatching(/^payload: does not match the schema of task "place_order": payload\.items: /),
    });
    expect(calls).toEqual([]);
  });

  it('still takes tasks outside the list through tusk.untyped', async () => {
    const { id } = await tusk.untyped.enqueue('not_in_the_list', { x: 1 });
    expect((await tusk.getJob(id))?.task).toBe('not_in_the_list');
  });

  it('refuses bad task lists and definitions with clear errors', () => {
    expect(() => new Tusk({ tasks: [add, add] })).toThrow('tasks[1].name: "add" is the name of an earlier task');
    expect(() => new Tusk({ tasks: { add } as never })).toThrow(
      /^Tusk options\.tasks\.add: a task made by defineTask carries its name: give a list/,
    );
    expect(() => defineTask('x', { queue: '' })).toThrow(/^definition\.queue: must not be empty/);
    expect(() => defineTask('x', { schema: {} as never })).toThrow(/^definition\.schema: must be a Standard Schema/);
    expect(() => db.tusk.worker({ tasks: [{ name: 'y', handler: () => 1, timeoutMs: -1 }] })).toThrow(
      /^worker options\.tasks\.0\.timeoutMs/,
    );
  });
});
