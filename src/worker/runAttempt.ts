import { TuskValidationError, UnknownTaskError } from '../errors.js';
import type { JsonText } from '../queries/outcomes.js';
import type { TaskDefinition } from '../tasks/definition.js';
import { validatePayload } from '../tasks/schema.js';
import type { SourceRegistry } from '../tasks/sources.js';
import { toJson } from '../validation/json.js';
import type { ActiveJob, JobLoader } from './activeJob.js';
import { DEFAULT_TIMEOUT_MS } from './options.js';

/** How a handler's run ended. `final`: a failure no retry can mend (a payload its task's schema refuses). */
export type Outcome = { ok: true; result: JsonText } | { ok: false; error: unknown; final?: boolean };

/** What running an attempt needs from the worker. */
export interface AttemptContext {
  /** The worker's tasks; `sources` has the methods of registered classes. */
  tasks: Map<string, TaskDefinition>;
  sources: SourceRegistry;
  /** Largest result accepted, as JSON. */
  maxPayloadBytes: number;
  /** What ctx.dependencies() reads. */
  load: JobLoader;
  /** Makes sure running attempts are stopped once a limit of `timeoutMs` has passed. */
  watch(timeoutMs: number): void;
}

/** The definition of the task of `job` in this worker, if it has one. */
export function taskOf(job: ActiveJob, ctx: AttemptContext): TaskDefinition | undefined {
  return ctx.tasks.get(job.row.task) ?? ctx.sources.definition(job.row.task);
}

/**
 * Runs the handler of `task` on the job's payload (its schema's output where it has
 * one), under the task's time limit; never throws. A job whose task has no handler here
 * fails like any other attempt; a payload its task's schema refuses fails for good.
 */
export async function runAttempt(
  job: ActiveJob,
  task: TaskDefinition | undefined,
  ctx: AttemptContext,
): Promise<Outcome> {
  try {
    if (!task?.handler) {
      const known =
        [...ctx.tasks.entries()]
          .filter(([, t]) => t.handler)
          .map(([k]) => JSON.stringify(k))
          .concat(ctx.sources.names())
          .join(', ') || 'none';
      throw new UnknownTaskError(
        `no handler for task ${JSON.stringify(job.row.task)} in this worker (it has: ${known})`,
      );
    }
    // the time limit runs from here: a payload validation that never settles ends with it
    const timeoutMs = task.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : task.timeoutMs;
    job.start(timeoutMs);
    if (timeoutMs !== null) ctx.watch(timeoutMs);
    let payload = job.row.payload;
    const { schema } = task;
    if (schema) {
      try {
        payload = await job.step(() => validatePayload(schema, payload, 'payload', job.row.task));
      } catch (error) {
        if (error instanceof TuskValidationError) return { ok: false, error, final: true };
        throw error;
      }
    }
    const value = await job.run(task.handler, payload, ctx.load);
    return { ok: true, result: value === undefined ? 'null' : toJson(value, 'result', ctx.maxPayloadBytes) };
  } catch (error) {
    return { ok: false, error };
  }
}
