import { TuskError } from '../errors.js';
import { importPeer } from '../peer.js';
import type { Sink, StagedJob } from './sink.js';

/** A BullMQ job as `Queue.addBulk` takes it, plus the queue it goes to. */
export interface BullMQJob {
  queue: string;
  name: string;
  data: unknown;
  opts?: Record<string, unknown>;
}

/** Options of `bullmqSink`. */
export interface BullMQSinkOptions {
  /** A Redis URL (default `REDIS_URL`, else `redis://127.0.0.1:6379`), or your own ioredis client. */
  connection?: string | RedisClientLike;
  /** BullMQ's key prefix (default BullMQ's, `bull`). */
  prefix?: string;
  /** The BullMQ queue of every job; default each job's Tusk queue (`default` if none). */
  queue?: string;
  /**
   * Gives each job the BullMQ id `staged-<StagedJob.key>` (unique across schemas and
   * installs), so a batch sent again after a crash adds no duplicate while BullMQ still
   * holds the first copy. Default false.
   */
  idempotent?: boolean;
  /**
   * Builds the BullMQ job yourself. Default: name = task, data = payload, and from the
   * options: delay (runAt), attempts (maxAttempts), priority (positive Tusk priorities
   * only: BullMQ runs jobs without a priority first).
   */
  map?: (job: StagedJob) => BullMQJob;
}

/** The part of an ioredis client used here. */
export interface RedisClientLike {
  status: string;
  on(event: 'error', listener: (error: Error) => void): unknown;
  once(event: 'ready' | 'error', listener: () => void): unknown;
  off(event: 'ready' | 'error', listener: () => void): unknown;
  quit(): Promise<unknown>;
  disconnect(): void;
}

interface QueueLike {
  addBulk(jobs: Array<{ name: string; data: unknown; opts?: Record<string, unknown> }>): Promise<unknown[]>;
  close(): Promise<void>;
  waitUntilReady(): Promise<unknown>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
type QueueCtor = new (name: string, options: { connection: unknown; prefix?: string }) => QueueLike;
type RedisCtor = new (url: string, options: Record<string, unknown>) => RedisClientLike;

/**
 * A sink that adds staged jobs to BullMQ queues on Redis, in staging order, one
 * `addBulk` (a Redis MULTI) per queue and batch. bullmq and ioredis (optional peer
 * dependencies) are loaded, and Redis connected, when the drainer starts. While Redis is
 * unreachable, sending fails at once (no offline queue) and the drainer retries with
 * backoff; rows stay staged.
 *
 * @example
 * const drainer = tusk.drainer({ sink: bullmqSink({ connection: 'redis://127.0.0.1:6379', idempotent: true }) });
 * await drainer.start();
 */
export function bullmqSink(options: BullMQSinkOptions = {}): Sink {
  const url =
    typeof options.connection === 'string' ? options.connection : (process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const own = typeof options.connection !== 'object';
  const queues = new Map<string, QueueLike>();
  let redis: Promise<RedisClientLike> | null = null;
  let lastError: Error | null = null;
  let Queue: QueueCtor | null = null;

  const connect = async (): Promise<RedisClientLike> => {
    Queue = (await loadPeer<{ Queue: QueueCtor }>('bullmq')).Queue;
    let client: RedisClientLike;
    if (typeof options.connection === 'object') {
      client = options.connection;
    } else {
      const mod = await loadPeer<{ Redis?: RedisCtor; default?: RedisCtor }>('ioredis');
      const Redis = (mod.Redis ?? mod.default) as RedisCtor;
      // no offline queue: while Redis is down, commands fail at once instead of piling up
      client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    }
    client.on('error', (error) => {
      lastError = error;
    });
    return client;
  };

  const queueFor = (client: RedisClientLike, name: string): QueueLike => {
    let queue = queues.get(name);
    if (!queue) {
      queue = new (Queue as QueueCtor)(name, {
        connection: client,
        ...(options.prefix ? { prefix: options.prefix } : {}),
      });
      queue.on('error', (error) => {
        lastError = error;
      });
      queues.set(name, queue);
    }
    return queue;
  };

  /**
   * The client, once its first connection is made or has failed (waited for, up to
   * CONNECT_WAIT_MS); a connection lost later is not waited for: sends fail at once.
   */
  const connected = async (): Promise<RedisClientLike> => {
    redis ??= connect().catch((error: unknown) => {
      redis = null;
      throw error;
    });
    const client = await redis;
    if (client.status === 'connecting' || client.status === 'wait') await ready(client, CONNECT_WAIT_MS);
    return client;
  };

  const map = options.map ?? ((job: StagedJob) => defaultJob(job, options));

  return {
    name: 'bullmq',
    async open() {
      const client = await connected();
      // BullMQ loads its scripts into Redis when a queue first connects
      if (options.queue && client.status === 'ready') await queueFor(client, options.queue).waitUntilReady();
    },
    async send(jobs, { signal }) {
      const client = await connected();
      if (client.status !== 'ready') {
        throw new Error(
          `Redis ${own ? `at ${redactUrl(url)} ` : ''}is not reachable (${client.status}${lastError ? `: ${lastError.message}` : ''})`,
        );
      }
      // one addBulk per queue, each in staging order
      const byQueue = new Map<string, Array<{ name: string; data: unknown; opts?: Record<string, unknown> }>>();
      for (const job of jobs) {
        const { queue, ...rest } = map(job);
        const list = byQueue.get(queue);
        if (list) list.push(rest);
        else byQueue.set(queue, [rest]);
      }
      for (const [name, list] of byQueue) {
        // an addBulk sent is out of reach (one MULTI); given up, send no more of them
        signal.throwIfAborted();
        await queueFor(client, name).addBulk(list);
      }
    },
    async close() {
      const client = await redis?.catch(() => null);
      redis = null;
      for (const queue of queues.values()) await queue.close().catch(() => {});
      queues.clear();
      if (client && own) await client.quit().catch(() => client.disconnect());
    },
  };
}

/** How long a send waits for a connection in progress before failing. */
const CONNECT_WAIT_MS = 2000;

/** Resolves when the client is ready, fails to connect, or after `ms`. */
function ready(client: RedisClientLike, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      client.off('ready', done);
      client.off('error', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    client.once('ready', done);
    client.once('error', done);
  });
}

/** The default mapping of a staged job to a BullMQ job (see BullMQSinkOptions.map). */
function defaultJob(job: StagedJob, options: BullMQSinkOptions): BullMQJob {
  const o = job.options;
  const opts: Record<string, unknown> = {};
  if (o.runAt) opts.delay = Math.max(0, o.runAt.getTime() - Date.now());
  if (o.maxAttempts !== undefined) opts.attempts = o.maxAttempts;
  if (o.priority !== undefined && o.priority > 0) opts.priority = o.priority;
  if (options.idempotent) opts.jobId = `staged-${job.key}`;
  return { queue: options.queue ?? o.queue ?? 'default', name: job.task, data: job.payload, opts };
}

/** A Redis URL without its password, for messages. */
function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}

/**
 * Loads the packages the BullMQ sink needs (bullmq, and ioredis for a connection given as
 * a URL), throwing an error that says what to install. The sink loads them at its first
 * send; a process that should not start without them (`tusk drain`) calls this first.
 *
 * @example
 * await bullmqSinkReady(); // throws: the BullMQ sink needs the package "bullmq" (npm install bullmq): …
 */
export async function bullmqSinkReady(options: Pick<BullMQSinkOptions, 'connection'> = {}): Promise<void> {
  await loadPeer('bullmq');
  if (typeof options.connection !== 'object') await loadPeer('ioredis');
}

/** Loads bullmq or ioredis, with an error that says what to install. */
const loadPeer = <T>(name: string) =>
  importPeer<T>(
    name,
    (error) => new TuskError(`the BullMQ sink needs the package "${name}" (npm install ${name}): ${error.message}`),
  );
