import { z } from 'zod';
import { TuskValidationError } from '../errors.js';
import { type TaskDefinition, type Tasks, taskMap, tasksSchema } from '../tasks/definition.js';
import { checkIsolatedModule } from '../tasks/isolate.js';
import { describe, flagSchema, integer, nameSchema, parse } from '../validation/validate.js';

export type { Handler, JobContext, TaskDefinition, Tasks } from '../tasks/definition.js';

/** Options of `tusk.worker()`. */
export interface WorkerOptions {
  /**
   * Handlers by task name, or a list of tasks made by `defineTask`; default the `tasks`
   * given to `new Tusk()`. Methods of classes registered with `tusk.register` run as well.
   */
  tasks?: Tasks;
  /** Handlers running at once; default 10. */
  concurrency?: number;
  /**
   * Queues to serve, each a name or [name, weight]; default all queues. With equal
   * weights they are served together.
   */
  queues?: Array<string | [string, number]>;
  /**
   * Jobs claimed ahead into a local buffer, so short jobs are fetched in batches.
   * `'auto'` (default) buffers what the handlers get through in ~25 ms, up to 2 000:
   * many for no-op jobs, none for slow ones. A number fixes it; 0 turns it off.
   * Buffered jobs count as running (their tenant's slots are taken) and, if this
   * process dies, they wait for crash recovery like running ones.
   */
  prefetch?: number | 'auto';
  /** Most jobs claimed, or outcomes written, in one statement; default 1 000. */
  batchSize?: number;
  /**
   * Write outcomes (completions, retries) without waiting for the server's disk: faster,
   * but if PostgreSQL itself crashes, the last outcomes may be lost and those jobs run
   * again (at-least-once still holds). Default false.
   */
  asyncCommit?: boolean;
  /**
   * Lease of a claimed job, renewed by heartbeats while it runs; default 30 s. A handler
   * whose lease the worker could not renew (cut off from PostgreSQL, frozen) is aborted
   * `min(5 s, leaseMs / 5)` before the lease can run out on the server, so that no other
   * worker starts the job while it still runs here.
   */
  leaseMs?: number;
  /**
   * Heartbeat period; default 1 s, or 15 % of a lease shorter than ~6.7 s. At most
   * `leaseMs / 2 - min(5 s, leaseMs / 5)`: a lease is renewed once half of it has run.
   */
  heartbeatMs?: number;
  /** Poll period when no notification arrives; default 1 s. */
  pollMs?: number;
  /**
   * Period of upkeep (crash recovery, promotion, expiry) and of enqueueing schedule
   * ticks (up to max(1 s, twice this) ahead); default 500 ms.
   */
  maintenanceMs?: number;
  /**
   * On stop(), how long running jobs may take to finish (their leases renewed meanwhile)
   * before they are released; default 10 s.
   */
  shutdownTimeoutMs?: number;
  /** Shown in the workers table and the dashboard; default host:pid. */
  name?: string;
}

const positive = (max: number) => integer(1, max);

const workerOptionsSchema = z.strictObject({
  tasks: tasksSchema.optional(),
  concurrency: positive(10_000).optional(),
  queues: z
    .array(
      z.union([
        nameSchema(128),
        z.tuple([
          nameSchema(128),
          z.number().refine((w) => w > 0 && w <= 1e6, {
            error: (issue) => `must be a weight above 0, at most 1000000 (got ${describe(issue.input)})`,
          }),
        ]),
      ]),
      { error: (issue) => `must be a list of queue names or [name, weight] (got ${describe(issue.input)})` },
    )
    .min(1, 'must not be empty (leave it out to serve all queues)')
    .optional(),
  prefetch: z
    .union([z.literal('auto'), integer(0, 10_000)], {
      error: (issue) => `must be 'auto' or an integer from 0 to 10000 (got ${describe(issue.input)})`,
    })
    .optional(),
  batchSize: positive(10_000).optional(),
  asyncCommit: flagSchema().optional(),
  leaseMs: positive(24 * 3600_000).optional(),
  heartbeatMs: positive(600_000).optional(),
  pollMs: positive(600_000).optional(),
  maintenanceMs: positive(600_000).optional(),
  shutdownTimeoutMs: integer(0, 24 * 3600_000).optional(),
  name: nameSchema(200).optional(),
});

/** Worker options with defaults filled in. */
export interface ResolvedWorkerOptions {
  tasks: Map<string, TaskDefinition>;
  concurrency: number;
  queues: Array<[string, number]> | null;
  prefetch: number | 'auto';
  batchSize: number;
  asyncCommit: boolean;
  leaseMs: number;
  /** A handler is aborted this long before its lease could run out on the server. */
  leaseMarginMs: number;
  heartbeatMs: number;
  pollMs: number;
  maintenanceMs: number;
  shutdownTimeoutMs: number;
  name: string | undefined;
}

export const DEFAULT_TIMEOUT_MS = 15 * 60_000;

/**
 * Worker options with defaults; `fallback` are the tasks given to `new Tusk()`,
 * `classes` says whether classes were registered (their jobs are tasks too).
 */
export function resolveWorkerOptions(
  options: WorkerOptions,
  fallback: Map<string, TaskDefinition>,
  classes = false,
): ResolvedWorkerOptions {
  const o = parse(workerOptionsSchema, options, 'worker options') as WorkerOptions;
  // an explicit `tasks: {}` is a worker doing upkeep only; no tasks anywhere is a mistake
  if (!o.tasks && fallback.size === 0 && !classes) {
    throw new TuskValidationError(
      'worker options.tasks',
      'no tasks: give them to the worker or to new Tusk({ tasks }), or register classes (tusk.register)',
    );
  }
  const tasks = o.tasks ? taskMap(o.tasks) : fallback;
  for (const [name, task] of tasks) {
    if (task.isolate) checkIsolatedModule(task.isolate, `${o.tasks ? 'worker options.' : ''}tasks.${name}.isolate`);
  }
  const leaseMs = o.leaseMs ?? 30_000;
  const leaseMarginMs = Math.min(5000, Math.floor(leaseMs / 5));
  const maxHeartbeatMs = Math.floor(leaseMs / 2) - leaseMarginMs;
  if (o.heartbeatMs !== undefined && o.heartbeatMs > maxHeartbeatMs) {
    throw new TuskValidationError(
      'worker options.heartbeatMs',
      `must be at most ${maxHeartbeatMs} with a lease of ${leaseMs} ms (a lease is renewed once half of it ` +
        `has run, and a handler is stopped ${leaseMarginMs} ms before its lease could end); got ${o.heartbeatMs}`,
    );
  }
  return {
    tasks,
    concurrency: o.concurrency ?? 10,
    queues: o.queues ? o.queues.map((q) => (typeof q === 'string' ? [q, 1] : q)) : null,
    prefetch: o.prefetch ?? 'auto',
    batchSize: o.batchSize ?? 1000,
    asyncCommit: o.asyncCommit ?? false,
    leaseMs,
    leaseMarginMs,
    heartbeatMs: o.heartbeatMs ?? Math.max(1, Math.min(1000, Math.floor(leaseMs * 0.15))),
    pollMs: o.pollMs ?? 1000,
    maintenanceMs: o.maintenanceMs ?? 500,
    shutdownTimeoutMs: o.shutdownTimeoutMs ?? 10_000,
    name: o.name,
  };
}

/** The names of the queues a worker serves (`queues` resolved); null: all of them. */
export function queueNames(queues: ResolvedWorkerOptions['queues']): string[] | null {
  return queues?.map(([name]) => name) ?? null;
}
