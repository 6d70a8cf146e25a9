import type { StandardSchemaV1 } from '@standard-schema/spec';
import { z } from 'zod';
import { TuskValidationError } from '../errors.js';
import type { RetryPolicy } from '../policies/backoff.js';
import {
  describe,
  furthest,
  integer,
  keysAt,
  MAX_DELAY_MS,
  nameSchema,
  unknownOptions,
} from '../validation/validate.js';
import type { Handler } from './handler.js';
import { type IsolateOptions, isolatedHandler } from './isolate.js';

export type { Handler, JobContext } from './handler.js';

/**
 * A task with settings. Producers use `tenant`, `queue` and `retry` as defaults when
 * enqueueing it and validate payloads by `schema`; workers validate them again, run
 * `handler` with `timeoutMs` and retry failures by `retry`.
 */
// biome-ignore lint/suspicious/noExplicitAny: see Handler
export interface TaskDefinition<Payload = any, Result = unknown> {
  handler?: Handler<Payload, Result>;
  /**
   * Validates payloads (zod, or any Standard Schema validator): at enqueue, and in the
   * worker before the handler runs, which gets the schema's output.
   */
  schema?: StandardSchemaV1;
  /** Tenant its jobs belong to unless an enqueue names another. */
  tenant?: string;
  /** Queue its jobs go to unless an enqueue names another. */
  queue?: string;
  /** Time limit of one attempt; default 15 minutes; null for none. */
  timeoutMs?: number | null;
  /** How failed attempts are retried (see RetryPolicy); an enqueue's own `retry` wins. */
  retry?: RetryPolicy;
  /**
   * Runs the handler in a thread of its own, with a memory limit, instead of `handler`:
   * the module and export that hold it (see IsolateOptions). Out of memory, a crash or a
   * timeout fails the attempt and stops the thread; the worker goes on.
   */
  isolate?: IsolateOptions;
}

/**
 * Task name → handler or definition, or a list of tasks made by `defineTask` (which
 * carry their names and, for TypeScript, their payload types).
 */
export type Tasks = Record<string, Handler | TaskDefinition> | readonly NamedTask[];

/** A task definition that carries its name (what `defineTask` makes). */
export interface NamedTask extends TaskDefinition {
  readonly name: string;
}

/** Task definitions by name, handlers wrapped as definitions, isolated ones given their handler. */
export function taskMap(tasks: Tasks | undefined): Map<string, TaskDefinition> {
  const map = new Map<string, TaskDefinition>();
  if (Array.isArray(tasks)) {
    for (const [i, task] of (tasks as readonly NamedTask[]).entries()) {
      if (map.has(task.name)) {
        throw new TuskValidationError(
          `tasks[${i}].name`,
          `${JSON.stringify(task.name)} is the name of an earlier task`,
        );
      }
      map.set(task.name, withIsolation(task));
    }
    return map;
  }
  for (const [name, task] of Object.entries(tasks ?? {})) {
    map.set(name, typeof task === 'function' ? { handler: task } : withIsolation(task));
  }
  return map;
}

const withIsolation = (task: TaskDefinition): TaskDefinition =>
  task.isolate ? { ...task, handler: isolatedHandler(task.isolate) } : task;

const isFunction = (f: unknown) => typeof f === 'function';

/** A retry policy as a task definition may give it (backoff may be a function). */
export const retrySchema = z.strictObject({
  maxAttempts: integer(1, 1000).optional(),
  backoff: z
    .union(
      [
        z.literal('exponential'),
        integer(0, MAX_DELAY_MS),
        z.custom<(e: unknown, n: number) => number | false>(isFunction),
      ],
      {
        error: (issue) =>
          `must be 'exponential', a number of milliseconds from 0 to ${MAX_DELAY_MS}, or a function (error, attempt) => ms | false (got ${describe(issue.input)})`,
      },
    )
    .optional(),
  queue: nameSchema(128).optional(),
});

/** A time limit of one attempt (null: none). */
export const timeoutSchema = integer(1, 2 ** 31 - 1).nullable();

/** A Standard Schema validator (zod 4, valibot, arktype, ...). */
const standardSchema = z.custom<StandardSchemaV1>(
  (s) => typeof (s as StandardSchemaV1 | null)?.['~standard']?.validate === 'function',
  { error: 'must be a Standard Schema validator (e.g. a zod schema)' },
);

const isolateSchema = z.strictObject(
  {
    module: z.union([z.string().min(1), z.instanceof(URL)], {
      error: (issue) =>
        `must be the handler's module: a file URL (new URL('./handler.js', import.meta.url)) or a path (got ${describe(issue.input)})`,
    }),
    export: z
      .string({ error: (issue) => `must be the name of an export (got ${describe(issue.input)})` })
      .min(1, 'must not be empty')
      .optional(),
    memoryMb: integer(8, 1_000_000).optional(),
  },
  { error: (issue) => `must be { module, export?, memoryMb? } (got ${describe(issue.input)})` },
);

/** The fields of a task definition, as checked. */
export const definitionShape = {
  handler: z.custom<Handler>(isFunction, { error: 'must be a function' }).optional(),
  schema: standardSchema.optional(),
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
  timeoutMs: timeoutSchema.optional(),
  retry: retrySchema.optional(),
  isolate: isolateSchema.optional(),
};

const oneHandler = {
  error: 'give handler or isolate, not both: an isolated task runs the export isolate names, in its thread',
  path: ['isolate'],
};
const hasOneHandler = (d: { handler?: unknown; isolate?: unknown }) => !(d.handler && d.isolate);

/** A task definition (without its name). */
export const definitionSchema = z.strictObject(definitionShape).refine(hasOneHandler, oneHandler);

const taskList = z.array(
  z.strictObject({ name: nameSchema(200), ...definitionShape }).refine(hasOneHandler, oneHandler),
);
const taskObject = z.record(
  nameSchema(200),
  z.union([z.custom<Handler>(isFunction), definitionSchema], {
    error: (issue) => `must be a handler function or a task definition (got ${describe(issue.input)})`,
  }),
);

/** `tasks` of `new Tusk()` and of `tusk.worker()`. */
export const tasksSchema = z
  .custom<Tasks>((v) => typeof v === 'object' && v !== null, {
    error: 'must be an object of task name → handler or definition, or a list of tasks made by defineTask',
  })
  .superRefine((tasks, ctx) => {
    // a union of the two would report both branches' errors for a mistake in either
    if (!Array.isArray(tasks)) {
      for (const [key, task] of Object.entries(tasks)) {
        if (typeof task === 'object' && task !== null && 'name' in task) {
          ctx.addIssue({
            code: 'custom',
            path: [key],
            message: 'a task made by defineTask carries its name: give a list, tasks: [sendEmail, ...]',
          });
          return;
        }
      }
    }
    const schema = Array.isArray(tasks) ? taskList : taskObject;
    const result = schema.safeParse(tasks);
    for (const found of result.error?.issues ?? []) {
      const { issue, at } = furthest(found);
      // said here, as the options known are out of `parse`'s sight behind this refinement
      if (issue.code === 'unrecognized_keys') {
        ctx.addIssue({ code: 'custom', path: at, message: unknownOptions(issue.keys, keysAt(schema, at)) });
      } else ctx.addIssue({ ...issue, path: at } as Parameters<typeof ctx.addIssue>[0]);
    }
  });
