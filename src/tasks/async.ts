import { TuskValidationError } from '../errors.js';
import type { Enqueued, EnqueueOptions } from '../types.js';
import { describe, enqueueOptionsSchema, isSourceId, parse, SOURCE_ID_RULE } from '../validation/validate.js';
import { type JsonArgs, jsonArgs } from './args.js';
import { isMethod, type SourceRegistry } from './sources.js';

/** Options of `tusk.async()`: those of enqueue; the source is the instance. */
export type AsyncOptions = Omit<EnqueueOptions, 'source'>;

/** The method names of `T` (string keys whose value is a function). */
type MethodName<T> = {
  [K in keyof T]: K extends string ? (T[K] extends (...args: never[]) => unknown ? K : never) : never;
}[keyof T];

/**
 * What `tusk.async(instance)` returns: each method of the instance, taking the same
 * arguments (as JSON data), enqueueing a job that calls it and resolving with its id.
 */
export type AsyncCalls<T> = {
  readonly [K in MethodName<T>]: T[K] extends (...args: infer A) => unknown
    ? (...args: JsonArgs<A>) => Promise<Enqueued>
    : never;
};

type Enqueue = (task: string, payload: unknown, options: EnqueueOptions) => Promise<Enqueued>;

/** The calls of `tusk.async(instance, options)` (see AsyncCalls). */
export function asyncCalls<T extends object>(
  sources: SourceRegistry,
  instance: T,
  options: AsyncOptions,
  enqueue: Enqueue,
): AsyncCalls<T> {
  const entry = sources.entryOf(instance);
  const opts = parse(enqueueOptionsSchema, options, 'options') as EnqueueOptions;
  if (opts.source !== undefined) throw new TuskValidationError('options.source', 'is the instance given to async()');
  const id = entry.id(instance);
  if (!isSourceId(id)) {
    throw new TuskValidationError(`${entry.name} id`, `${SOURCE_ID_RULE} (the id option gave ${describe(id)})`);
  }
  return new Proxy({} as AsyncCalls<T>, {
    get(_, method) {
      if (typeof method !== 'string') return undefined;
      if (!isMethod(entry.cls, method)) {
        // `await tusk.async(x)` reads `then`: not a method call
        if (method === 'then') return undefined;
        throw new TuskValidationError('method', `${entry.name} has no method ${JSON.stringify(method)}`);
      }
      const task = `${entry.name}.${method}`;
      return async (...args: unknown[]) =>
        enqueue(task, jsonArgs(args, task), { ...opts, source: { type: entry.name, id, method } });
    },
  });
}
