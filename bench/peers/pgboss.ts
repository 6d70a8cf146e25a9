import { availableParallelism } from 'node:os';
import PgBoss from 'pg-boss';
import { dropSchema } from '../../src/migrate/migrate.js';
import { count, type Mode, type Payload, type Peer, type PeerContext } from './types.js';

const QUEUE = 'bench';

interface Work {
  /** `work()` calls on the worker's instance: each adds its own polling loop. */
  loops: number;
  options: PgBoss.WorkOptions;
}

/**
 * pg-boss 10 worker settings, as its docs give them (Workers, `work()`): each `work()`
 * call adds a polling worker; `batchSize` is how many jobs one fetch returns; a worker
 * polls every `pollingIntervalSeconds` (default 2, at least 0.5). Defaults: one `work()`,
 * one job per fetch, every 2 s. Tuned, for throughput: four `work()` loops per core, each
 * fetching up to 500 jobs and polling at the shortest interval accepted. (A worker fetches
 * once per interval unless the fetch and its handler take longer, so loops × batchSize ÷
 * interval bounds the rate.) Both use the instance's default pool of 10 connections.
 */
const LOOPS = Math.max(1, availableParallelism()) * 4;
const WORK: Record<Mode, Work> = {
  defaults: { loops: 1, options: {} },
  tuned: { loops: LOOPS, options: { batchSize: 500, pollingIntervalSeconds: 0.5, includeMetadata: false } },
};

/** Errors are emitted as events (an 'error' event without a listener throws): keep, don't print. */
function quiet(boss: PgBoss, errors: string[]): PgBoss {
  boss.on('error', (error) => {
    if (errors.length < 20) errors.push(error.message);
  });
  return boss;
}

export function pgbossPeer(ctx: PeerContext): Peer {
  const schema = ctx.schema ?? 'bench_pgboss';
  const errors: string[] = [];
  let producer: Promise<PgBoss> | null = null;
  // the producer is the harness, not the system under test: no maintenance or cron loops
  // running in the parent while a worker child drains
  const boss = () => {
    producer ??= quiet(
      new PgBoss({ connectionString: ctx.url, schema, supervise: false, schedule: false, max: 4 }),
      errors,
    ).start();
    return producer;
  };
  const close = async () => {
    const b = await producer?.catch(() => null);
    producer = null;
    await b?.stop({ graceful: false, wait: true });
  };
  const job = `"${schema}".job`;
  return {
    system: 'pgboss',
    label: 'pg-boss',
    schema,
    settings: WORK,
    describe: {
      defaults: '1 work(), batchSize 1, poll 2 s',
      tuned:
        `${WORK.tuned.loops} work() × batchSize ${WORK.tuned.options.batchSize}, ` +
        `poll ${WORK.tuned.options.pollingIntervalSeconds} s`,
    },
    drainCap: { defaults: { jobs: 5000, ms: 60_000 } },
    async setup() {
      await close();
      await dropSchema(ctx.pool, schema);
      await (await boss()).createQueue(QUEUE);
    },
    async teardown() {
      await close();
      await dropSchema(ctx.pool, schema);
    },
    async bulkEnqueue(payloads) {
      await (await boss()).insert(payloads.map((data) => ({ name: QUEUE, data })));
    },
    async enqueueOne(payload) {
      await (await boss()).send(QUEUE, payload);
    },
    async vacuum() {
      await ctx.pool.query(`VACUUM ANALYZE ${job}`);
    },
    async counts() {
      return {
        completed: await count(ctx.pool, `${job} WHERE name = $1 AND state = 'completed'`, [QUEUE]),
        remaining: await count(ctx.pool, `${job} WHERE name = $1 AND state IN ('created', 'retry', 'active')`, [QUEUE]),
      };
    },
    progress: () => count(ctx.pool, `${job} WHERE name = $1 AND state = 'completed'`, [QUEUE]),
    async startWorker(mode, onJob) {
      // the worker's own instance, with pg-boss's defaults (maintenance, cron monitor, pool of 10)
      const worker = quiet(new PgBoss({ connectionString: ctx.url, schema }), errors);
      await worker.start();
      const { loops, options } = WORK[mode];
      for (let i = 0; i < loops; i++) {
        await worker.work<Payload>(QUEUE, options, async (jobs) => {
          for (const j of jobs) onJob(j.data);
        });
      }
      return {
        async stop() {
          await worker.stop({ graceful: true, wait: true, timeout: 5000 });
        },
      };
    },
    close,
  };
}
