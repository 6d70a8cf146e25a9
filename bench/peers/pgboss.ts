import PgBoss from 'pg-boss';
import { dropSchema } from '../../src/migrate/migrate.js';
import { count, type Mode, type Payload, type Peer, type PeerContext } from './types.js';

const QUEUE = 'bench';

/**
 * pg-boss `work()` options. Its defaults fetch one job per poll and poll every 2 s.
 * Tuned: 100 jobs per fetch, and the shortest polling interval it accepts (0.5 s);
 * metadata off. (A v10 worker fetches once per polling interval unless a fetch and its
 * handler take longer, so batchSize / interval bounds one `work()` call's rate.)
 */
const WORK: Record<Mode, PgBoss.WorkOptions> = {
  defaults: {},
  tuned: { batchSize: 100, pollingIntervalSeconds: 0.5, includeMetadata: false },
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
      await worker.work<Payload>(QUEUE, WORK[mode], async (jobs) => {
        for (const j of jobs) onJob(j.data);
      });
      return {
        async stop() {
          await worker.stop({ graceful: true, wait: true, timeout: 5000 });
        },
      };
    },
    close,
  };
}
