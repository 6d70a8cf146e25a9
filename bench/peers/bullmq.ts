import { type ConnectionOptions, Queue, Worker, type WorkerOptions } from 'bullmq';
import { type Mode, type Payload, type Peer, type PeerContext, PeerUnavailable, TASK } from './types.js';

/**
 * Worker settings besides the connection. Defaults: one job at a time. Tuned: the local
 * concurrency factor of BullMQ's docs (guide "Parallelism and Concurrency", "How to best
 * use BullMQ's concurrency then?": 100 to 300 is a standard setting for jobs that do IO;
 * a no-op job does none, so the low end; Workers, "Concurrency").
 */
const WORK: Record<Mode, Omit<WorkerOptions, 'connection'>> = { defaults: {}, tuned: { concurrency: 100 } };

interface RedisClient {
  quit(): Promise<unknown>;
  disconnect(): void;
}
type RedisCtor = new (url: string, options: Record<string, unknown>) => RedisClient;

/**
 * BullMQ 6 loads ioredis with `require`, which its ESM build does not have: it needs a
 * client instance. ioredis is an optional peer of bullmq, imported here by a computed
 * name so that the bench type-checks and runs (without this row) where it is missing.
 */
async function loadRedis(): Promise<RedisCtor> {
  const name = 'ioredis';
  try {
    const mod = (await import(name)) as { Redis?: RedisCtor; default?: RedisCtor };
    const ctor = mod.Redis ?? mod.default;
    if (typeof ctor !== 'function') throw new Error('no Redis constructor in ioredis');
    return ctor;
  } catch (error) {
    throw new PeerUnavailable(`BullMQ needs the ioredis package (npm install -D ioredis): ${(error as Error).message}`);
  }
}

export function bullmqPeer(ctx: PeerContext): Peer {
  const name = ctx.schema ?? 'bench-bullmq';
  const clients: RedisClient[] = [];
  const connect = async () => {
    const Redis = await loadRedis();
    // maxRetriesPerRequest: null is what BullMQ requires of a worker's connection
    const client = new Redis(ctx.redisUrl, { maxRetriesPerRequest: null });
    clients.push(client);
    return client as unknown as ConnectionOptions;
  };
  let queue: Promise<Queue> | null = null;
  const q = () => {
    queue ??= connect().then((connection) => new Queue(name, { connection }));
    return queue;
  };
  const completed = async () => (await q()).getCompletedCount();
  const close = async () => {
    const qq = await queue?.catch(() => null);
    queue = null;
    await qq?.close();
    for (const c of clients.splice(0)) await c.quit().catch(() => c.disconnect());
  };
  return {
    system: 'bullmq',
    label: 'BullMQ (Redis)',
    schema: name,
    settings: WORK,
    describe: { defaults: 'concurrency 1', tuned: `concurrency ${WORK.tuned.concurrency}` },
    async setup() {
      await (await q()).obliterate({ force: true });
    },
    async teardown() {
      await (await q()).obliterate({ force: true });
      await close();
    },
    async bulkEnqueue(payloads) {
      await (await q()).addBulk(payloads.map((data) => ({ name: TASK, data })));
    },
    async enqueueOne(payload) {
      await (await q()).add(TASK, payload);
    },
    async vacuum() {},
    async counts() {
      const queue = await q();
      return {
        completed: await queue.getCompletedCount(),
        remaining: await queue.getJobCountByTypes('wait', 'active', 'delayed', 'prioritized', 'waiting-children'),
      };
    },
    progress: completed,
    async startWorker(mode, onJob) {
      const connection = await connect();
      const worker = new Worker<Payload>(
        name,
        async (job) => {
          onJob(job.data);
        },
        { ...WORK[mode], connection },
      );
      // errors are events; keep them off the console
      worker.on('error', () => {});
      await worker.waitUntilReady();
      return {
        async stop() {
          await worker.close();
        },
      };
    },
    close,
  };
}
