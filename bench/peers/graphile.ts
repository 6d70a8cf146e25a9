import { Logger, makeWorkerUtils, type RunnerOptions, run, type WorkerUtils } from 'graphile-worker';
import { dropSchema } from '../../src/migrate/migrate.js';
import { count, type Mode, type Payload, type Peer, type PeerContext, TASK } from './types.js';

/** Logging off, as Tusk's `logger: false`. */
const silent = new Logger(() => () => {});

/**
 * graphile-worker's configuration for throughput as its docs give it (the "Performance"
 * page: the preset its published figures were measured with, batching options included);
 * defaults are no options at all (concurrentJobs 1, pool of 10, no local queue, no
 * completion batching). Bulk enqueue is `addJobs` (one call, one statement per chunk).
 */
const TUNED: GraphileConfig.Preset = {
  worker: {
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: 500 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};

export function graphilePeer(ctx: PeerContext): Peer {
  const schema = ctx.schema ?? 'bench_graphile';
  const jobs = `"${schema}"._private_jobs`;
  let utils: Promise<WorkerUtils> | null = null;
  const producer = () => {
    utils ??= makeWorkerUtils({ connectionString: ctx.url, schema, logger: silent });
    return utils;
  };
  const close = async () => {
    const u = await utils?.catch(() => null);
    utils = null;
    await u?.release();
  };
  const settings: Record<Mode, Partial<RunnerOptions>> = { defaults: {}, tuned: { preset: TUNED } };
  return {
    system: 'graphile',
    label: 'graphile-worker',
    schema,
    settings,
    describe: {
      defaults: 'concurrentJobs 1',
      tuned:
        `concurrentJobs ${TUNED.worker?.concurrentJobs}, maxPoolSize ${TUNED.worker?.maxPoolSize}, ` +
        `localQueue ${TUNED.worker?.localQueue?.size}, complete/failJobBatchDelay 0`,
    },
    async setup() {
      await close();
      await dropSchema(ctx.pool, schema);
      await (await producer()).migrate();
    },
    async teardown() {
      await dropSchema(ctx.pool, schema);
    },
    async bulkEnqueue(payloads) {
      await (await producer()).addJobs(payloads.map((payload) => ({ identifier: TASK, payload })));
    },
    async enqueueOne(payload) {
      await (await producer()).addJob(TASK, payload);
    },
    async vacuum() {
      await ctx.pool.query(`VACUUM ANALYZE ${jobs}`);
      await ctx.pool.query(`VACUUM ANALYZE "${schema}"._private_job_queues`);
    },
    // completed jobs are deleted
    counts: async () => ({ completed: null, remaining: await count(ctx.pool, jobs) }),
    progress: async () => -(await count(ctx.pool, jobs)),
    async startWorker(mode, onJob) {
      const runner = await run({
        connectionString: ctx.url,
        schema,
        logger: silent,
        // the bench process handles SIGTERM itself (to report before it exits)
        noHandleSignals: true,
        taskList: {
          [TASK]: async (payload) => {
            onJob(payload as Payload);
          },
        },
        ...settings[mode],
      });
      const ended = runner.promise.catch(() => {});
      return {
        async stop() {
          await runner.stop();
          await ended;
        },
      };
    },
    close,
  };
}
