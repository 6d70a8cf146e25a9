import { z } from 'zod';
import { TuskError, TuskNotFoundError, TuskValidationError, UnknownTaskError } from '../errors.js';
import type { RetryPolicy } from '../policies/backoff.js';
import { nameSchema, parse } from '../validation/validate.js';
import { type JobContext, retrySchema, type TaskDefinition, timeoutSchema } from './definition.js';

/** How `tusk.register` finds and names the instances of a class. */
export interface SourceOptions<T> {
  /**
   * Loads an instance by its id (as a string: ids are stored as text), in the worker.
   * `ctx` is the job's (its tenant, its signal). Null or undefined: not found, the
   * attempt fails (and is retried).
   */
  load: (id: string, ctx: JobContext) => T | null | undefined | Promise<T | null | undefined>;
  /** The id of an instance: what `load` gets back. */
  id: (instance: T) => string | number;
  /**
   * The type name in task names (`DataReport.execute`) and in the job's source. Default
   * the class's name; give one if your build renames classes (minifiers do).
   */
  name?: string;
  /** Defaults of the class's jobs, as in a task definition. */
  tenant?: string;
  queue?: string;
  retry?: RetryPolicy;
  timeoutMs?: number | null;
}

interface Entry {
  name: string;
  cls: abstract new (...args: never[]) => unknown;
  load: SourceOptions<unknown>['load'];
  id: SourceOptions<unknown>['id'];
  defaults: Omit<TaskDefinition, 'handler' | 'schema'>;
}

const isFunction = (f: unknown) => typeof f === 'function';
const optionsSchema = z.strictObject({
  load: z.custom(isFunction, { error: 'must be a function (id, ctx) => instance' }),
  id: z.custom(isFunction, { error: 'must be a function (instance) => id' }),
  name: nameSchema(128)
    .refine((n) => !n.includes('.'), 'must not contain "." (task names are Type.method)')
    .optional(),
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
  retry: retrySchema.optional(),
  timeoutMs: timeoutSchema.optional(),
});

/** The method `name` of a class: a function on its prototype chain (not a field or getter). */
export function isMethod(cls: Entry['cls'], name: string): boolean {
  if (name === 'constructor') return false;
  for (let proto = cls.prototype; proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    const descriptor = Object.getOwnPropertyDescriptor(proto, name);
    if (descriptor) return typeof descriptor.value === 'function';
  }
  return false;
}

/**
 * The classes registered with `tusk.register`: the producer finds an instance's class and
 * id; the worker runs jobs named `Type.method` by loading the instance and calling the
 * method with the job's payload (the arguments) as arguments.
 */
export class SourceRegistry {
  readonly #byClass = new Map<Entry['cls'], Entry>();
  readonly #byName = new Map<string, Entry>();
  /** Definitions of the jobs `Type.method` seen so far. */
  readonly #definitions = new Map<string, TaskDefinition>();

  get size(): number {
    return this.#byName.size;
  }

  register<T>(cls: abstract new (...args: never[]) => T, options: SourceOptions<T>): void {
    if (typeof cls !== 'function' || typeof cls.prototype !== 'object') {
      throw new TuskValidationError('class', 'must be a class');
    }
    const o = parse(optionsSchema, options, 'options') as SourceOptions<T>;
    const name = o.name ?? cls.name;
    if (!name) throw new TuskValidationError('options.name', 'is needed: the class has no name');
    if (name.includes('.')) throw new TuskValidationError('options.name', `must not contain "." (got ${name})`);
    if (this.#byClass.has(cls)) throw new TuskValidationError('class', `${name} is registered already`);
    if (this.#byName.has(name)) {
      throw new TuskValidationError('options.name', `${JSON.stringify(name)} is the name of another registered class`);
    }
    const entry: Entry = {
      name,
      cls,
      load: o.load as Entry['load'],
      id: o.id as Entry['id'],
      defaults: { tenant: o.tenant, queue: o.queue, retry: o.retry, timeoutMs: o.timeoutMs },
    };
    this.#byClass.set(cls, entry);
    this.#byName.set(name, entry);
  }

  /** The registered class of `instance` (the nearest on its prototype chain). */
  entryOf(instance: unknown): Entry {
    if (typeof instance !== 'object' || instance === null) {
      throw new TuskValidationError('instance', 'must be an instance of a registered class');
    }
    for (let proto = Object.getPrototypeOf(instance); proto; proto = Object.getPrototypeOf(proto)) {
      const entry = this.#byClass.get(proto.constructor);
      if (entry) return entry;
    }
    const cls = (instance as { constructor?: { name?: string } }).constructor?.name || 'its class';
    throw new TuskError(`${cls} is not registered: call tusk.register(${cls}, { load, id }) first`);
  }

  /** The definition of the job `Type.method`, or undefined when Type is not registered. */
  definition(task: string): TaskDefinition | undefined {
    const cached = this.#definitions.get(task);
    if (cached) return cached;
    const dot = task.indexOf('.');
    const entry = dot > 0 ? this.#byName.get(task.slice(0, dot)) : undefined;
    if (!entry) return undefined;
    const method = task.slice(dot + 1);
    if (!isMethod(entry.cls, method)) {
      // an unknown method is not cached: any job name could make an entry
      return {
        handler: () => {
          throw new UnknownTaskError(`${entry.name} has no method ${JSON.stringify(method)} in this worker`);
        },
      };
    }
    const definition: TaskDefinition = { ...entry.defaults, handler: (args, ctx) => call(entry, method, args, ctx) };
    this.#definitions.set(task, definition);
    return definition;
  }

  /** `Type.*` for each registered class, for error messages. */
  names(): string[] {
    return [...this.#byName.keys()].map((name) => `${name}.*`);
  }
}

/** Runs a `Type.method` job: loads the instance by the job's source id, calls the method. */
async function call(entry: Entry, method: string, args: unknown, ctx: JobContext): Promise<unknown> {
  const id = ctx.job.source?.id;
  if (id === undefined) {
    throw new TuskError(`job ${ctx.job.id} (${ctx.job.task}) has no source id: enqueue it with tusk.async(instance)`);
  }
  if (!Array.isArray(args)) throw new TuskError(`the payload of ${ctx.job.task} must be the array of its arguments`);
  const instance = await entry.load(id, ctx);
  if (instance === null || instance === undefined) {
    throw new TuskNotFoundError(`${entry.name} ${JSON.stringify(id)} not found (load returned ${instance})`);
  }
  const fn = (instance as Record<string, unknown>)[method];
  if (typeof fn !== 'function') throw new TuskError(`${entry.name} ${JSON.stringify(id)} has no method ${method}`);
  return fn.apply(instance, args);
}
