import { Tusk, type WorkerOptions } from '../lib/tusk.js';
import { count, type Mode, type Payload, type Peer, type PeerContext, TASK } from './types.js';

/**
 * Tusk's "tuned" worker settings for the peer comparison: bigger batches (up to 4 000
 * jobs in hand, 2 000 per statement) and outcomes committed without waiting for disk
 * (a server crash may lose the last ones; those jobs run again). The defaults are what
 * `tusk.worker()` does with no options (concurrency 10, prefetch 'auto').
 */
export const TUSK_TUNED: Omit<WorkerOptions, 'tasks'> = { prefetch: 4000, batchSize: 2000, asyncCommit: true };

export function tuskPeer(ctx: PeerContext): Peer {
  const schema = ctx.schema ?? 'bench_tusk';
  let tusk: Tusk | null = null;
  let historyMark: string | null = null;
  const client = () => {
    tusk ??= new Tusk({ connectionString: ctx.url, schema, logger: false });
    return tusk;
  };
  const close = async () => {
    await tusk?.close();
    tusk = null;
    historyMark = null;
  };
  const settings: Record<Mode, Omit<WorkerOptions, 'tasks'>> = { defaults: {}, tuned: TUSK_TUNED };
  return {
    system: 'tusk',
    label: 'Tusk',
    schema,
    settings,
    describe: {
      defaults: 'concurrency 10, prefetch auto',
      tuned: `prefetch ${TUSK_TUNED.prefetch}, batchSize ${TUSK_TUNED.batchSize}, asyncCommit`,
    },
    async setup() {
      await close();
      await ctx.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client().migrate();
    },
    async teardown() {
      await ctx.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },
    async bulkEnqueue(payloads) {
      await client().enqueueMany(payloads.map((payload) => ({ task: TASK, payload })));
    },
    async enqueueOne(payload) {
      await client().enqueue(TASK, payload);
    },
    async vacuum() {
      await ctx.pool.query(`VACUUM ANALYZE "${schema}".jobs`);
      await ctx.pool.query(`VACUUM ANALYZE "${schema}".job_history`);
    },
    async counts() {
      return {
        completed: await count(ctx.pool, `"${schema}".job_history`),
        remaining: await count(ctx.pool, `"${schema}".jobs`),
      };
    },
    // history rows past the newest one at the first call (the jobs drained are newer): an
    // index range scan, where counting jobs would read the whole backlog
    async progress() {
      if (historyMark === null) {
        const { rows } = await ctx.pool.query<{ id: string }>(
          `SELECT coalesce(max(id), 0)::text AS id FROM "${schema}".job_history`,
        );
        historyMark = rows[0]?.id ?? '0';
      }
      return count(ctx.pool, `"${schema}".job_history WHERE id > $1`, [historyMark]);
    },
    async startWorker(mode, onJob) {
      // its own instance: the worker's pool is not shared with the producer's
      const own = new Tusk({ connectionString: ctx.url, schema, logger: false });
      const worker = own.worker({
        ...settings[mode],
        tasks: {
          [TASK]: (payload: Payload) => {
            onJob(payload);
          },
        },
      });
      await worker.start();
      return {
        async stop() {
          await worker.stop();
          await own.close();
        },
      };
    },
    close,
  };
}
