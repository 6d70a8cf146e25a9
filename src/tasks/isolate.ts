import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker as Thread } from 'node:worker_threads';
import { HandlerCrashedError, TuskValidationError } from '../errors.js';
import type { Handler, JobContext } from './handler.js';

/**
 * Runs a task's handler in a thread of its own (`node:worker_threads`), with a memory
 * limit: a handler that runs out of memory, crashes its thread or never returns fails its
 * job (retried as usual) and the worker goes on. A function cannot cross to another
 * thread, so the handler is named by its module and export.
 *
 * @example
 * defineTask('resize', {
 *   isolate: { module: new URL('./resize.js', import.meta.url), export: 'resize', memoryMb: 64 },
 *   timeoutMs: 60_000,
 * });
 */
export interface IsolateOptions {
  /**
   * The module exporting the handler: a file URL (`new URL('./resize.js',
   * import.meta.url)`) or a path, resolved against the working directory when relative.
   */
  module: string | URL;
  /** The export holding the handler `(payload, ctx) => result`; default `'default'`. */
  export?: string;
  /**
   * Heap limit of the thread in MB (V8's old generation): past it the thread is stopped
   * and the attempt fails with HandlerCrashedError. Buffers and ArrayBuffers live outside
   * the heap and are not counted. Default: no limit but the process's.
   */
  memoryMb?: number;
}

let live = 0;

/** Threads of isolated handlers alive now (a stopped one counts until it has exited). */
export const isolatedThreads = (): number => live;

/** The module's file URL: relative paths against the working directory, now, not when a job runs. */
export function moduleUrl(module: string | URL): URL {
  if (module instanceof URL) return module;
  return module.startsWith('file:') ? new URL(module) : pathToFileURL(resolve(module));
}

/** Refuses an isolated task whose module file is not there (found at worker start, not at each job). */
export function checkIsolatedModule(options: IsolateOptions, field: string): void {
  const url = moduleUrl(options.module);
  if (url.protocol !== 'file:') throw new TuskValidationError(`${field}.module`, `must be a file (got ${url.href})`);
  if (!existsSync(fileURLToPath(url))) {
    throw new TuskValidationError(`${field}.module`, `no such file: ${fileURLToPath(url)}`);
  }
}

/**
 * A handler that runs the named export in a new thread per attempt. Aborting the attempt
 * (timeout, cancel, shutdown, lost lease) terminates the thread: inside it, `ctx.signal`
 * never fires, as the thread is stopped instead.
 */
export function isolatedHandler(options: IsolateOptions): Handler {
  const module = moduleUrl(options.module).href;
  const exportName = options.export ?? 'default';
  const { memoryMb } = options;
  return async (payload: unknown, ctx: JobContext) => {
    // read here, before the thread starts: the thread has no connection of its own
    const dependencies = ctx.job.dependsOn.length > 0 ? await ctx.dependencies() : [];
    return new Promise((resolvePromise, reject) => {
      const { signal } = ctx;
      if (signal.aborted) return reject(signal.reason);
      const thread = new Thread(THREAD_SOURCE, {
        eval: true,
        workerData: { module, exportName, payload, job: ctx.job, dependencies },
        ...(memoryMb === undefined ? {} : { resourceLimits: { maxOldGenerationSizeMb: memoryMb } }),
      });
      // counted until the thread is gone, not until the job is settled
      live++;
      thread.once('exit', () => live--);
      let settled = false;
      const finish = (settle: () => void) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        void thread.terminate();
        settle();
      };
      const onAbort = () => finish(() => reject(signal.reason));
      signal.addEventListener('abort', onAbort);
      thread.on('message', (message: ThreadMessage) => {
        if (message.type === 'stats') ctx.stats(message.values);
        else if (message.type === 'progress') ctx.progress(message.value);
        else if (message.type === 'done') finish(() => resolvePromise(message.result));
        else finish(() => reject(revive(message.error)));
      });
      thread.on('error', (error: Error & { code?: string }) =>
        finish(() =>
          reject(
            error?.code === 'ERR_WORKER_OUT_OF_MEMORY'
              ? new HandlerCrashedError(
                  memoryMb === undefined
                    ? 'the handler ran out of memory'
                    : `the handler ran out of its ${memoryMb} MB of memory (isolate.memoryMb)`,
                )
              : new HandlerCrashedError(`the handler's thread crashed: ${error?.message ?? String(error)}`, {
                  cause: error,
                }),
          ),
        ),
      );
      thread.on('exit', (code) =>
        finish(() => reject(new HandlerCrashedError(`the handler's thread exited (code ${code}) before it finished`))),
      );
    });
  };
}

type ThreadMessage =
  | { type: 'stats'; values: Record<string, unknown> }
  | { type: 'progress'; value: unknown }
  | { type: 'done'; result: unknown }
  | { type: 'failed'; error: { name: string; message: string; stack?: string } };

/** The thread's error as an Error here, with its name and stack (a non-Error is described). */
function revive(error: { name: string; message: string; stack?: string }): Error {
  const revived = new Error(error.message);
  revived.name = error.name;
  revived.stack = error.stack;
  return revived;
}

/**
 * The thread's program (CommonJS, evaluated: a file next to this one would not be
 * JavaScript when Tusk runs from its TypeScript sources). It loads the module, calls the
 * export, and posts the result, or the error as plain data: name, message, stack.
 */
const THREAD_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { inspect, types } = require('node:util');
const { module, exportName, payload, job, dependencies } = workerData;
const failed = (name, message, stack) => parentPort.postMessage({ type: 'failed', error: { name, message, stack } });
function fail(error) {
  try {
    if (error instanceof Error || types.isNativeError(error)) {
      return failed(String(error.name), String(error.message), error.stack === undefined ? undefined : String(error.stack));
    }
  } catch {}
  let text;
  try {
    text = typeof error === 'string' ? JSON.stringify(error) : inspect(error, { depth: 3, breakLength: Infinity });
  } catch {
    text = 'a value that cannot be described';
  }
  failed('NonError', 'a non-Error value was thrown: ' + text);
}
(async () => {
  let handler;
  try {
    handler = (await import(module))[exportName];
  } catch (error) {
    return failed('HandlerCrashedError', 'cannot load ' + module + ': ' + (error && error.message));
  }
  if (typeof handler !== 'function') {
    return failed('HandlerCrashedError', module + ' has no export ' + JSON.stringify(exportName) + ' that is a function (it is ' + typeof handler + ')');
  }
  const ctx = {
    job,
    signal: new AbortController().signal,
    stats: (values) => parentPort.postMessage({ type: 'stats', values }),
    progress: (value) => parentPort.postMessage({ type: 'progress', value }),
    dependencies: async () => dependencies,
  };
  let result;
  try {
    result = await handler(payload, ctx);
  } catch (error) {
    return fail(error);
  }
  try {
    parentPort.postMessage({ type: 'done', result });
  } catch (error) {
    failed('HandlerCrashedError', 'the handler returned what cannot leave its thread: ' + (error && error.message));
  }
})();
`;
