// Staged drain: how fast staged jobs are forwarded. Stages N jobs in the
// database, then times one drainer moving them to BullMQ on Redis, and to Tusk's own
// queue; next to it, BullMQ's own addBulk of the same jobs (what the sink costs on its own).
import { performance } from 'node:perf_hooks';
import { type ConnectionOptions, Queue } from 'bullmq';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { saveResults, serverInfo, sleep, status, statusDone } from '../lib/env.js';
import { bullmqSink, Tusk } from '../lib/tusk.js';

export interface DrainOptions {
  url: string;
  redisUrl: string;
  jobs: number;
  batchSizes: number[];
}

interface Row {
  what: string;
  batchSize: number | null;
  jobs: number;
  ms: number;
  jobsPerSec: number;
}

const SCHEMA = 'bench_drain';
const QUEUE = 'bench-drain';
const STAGE_CHUNK = 5000;

const payload = (n: number) => ({ n, user: `user-${n % 1000}`, kind: 'email' });

async function redisClient(url: string) {
  const { Redis } = await import('ioredis');
  return new Redis(url, { maxRetriesPerRequest: null });
}

/** Stages `n` jobs in chunks; returns the staging rate. */
async function stageAll(tusk: Tusk, n: number): Promise<Row> {
  const pool = await tusk.pool();
  const t0 = performance.now();
  for (let i = 0; i < n; i += STAGE_CHUNK) {
    const size = Math.min(STAGE_CHUNK, n - i);
    await tusk.stageMany(
      pool,
      Array.from({ length: size }, (_, k) => ({ task: 'notify', payload: payload(i + k), tenant: `t${(i + k) % 10}` })),
    );
    status(`drain · staging ${(i + size).toLocaleString('en')} / ${n.toLocaleString('en')}`);
  }
  const ms = performance.now() - t0;
  return { what: 'stage (stageMany, 5 000 per call)', batchSize: null, jobs: n, ms, jobsPerSec: (n * 1000) / ms };
}

/** Runs a drainer until nothing is staged; returns its rate. */
async function drainAll(tusk: Tusk, what: string, sink: Parameters<Tusk['drainer']>[0]['sink'], batchSize: number) {
  const n = await tusk.stagedCount();
  const drainer = tusk.drainer({ sink, batchSize, pollMs: 50 });
  const t0 = performance.now();
  await drainer.start();
  while (drainer.forwarded < n) {
    status(
      `drain · ${what}, batches of ${batchSize}: ${drainer.forwarded.toLocaleString('en')} / ${n.toLocaleString('en')}`,
    );
    await sleep(100);
  }
  const ms = performance.now() - t0;
  await drainer.stop();
  return { what, batchSize, jobs: n, ms, jobsPerSec: (n * 1000) / ms };
}

export async function drain(o: DrainOptions): Promise<void> {
  const pool = new pg.Pool({ connectionString: o.url, max: 2 });
  const redis = await redisClient(o.redisUrl);
  const queue = new Queue(QUEUE, { connection: redis as unknown as ConnectionOptions });
  const rows: Row[] = [];
  let tusk: Tusk | null = null;
  try {
    status('drain · setting up');
    await dropSchema(pool, SCHEMA);
    tusk = new Tusk({ connectionString: o.url, schema: SCHEMA, logger: false });
    await tusk.migrate();

    for (const batchSize of o.batchSizes) {
      await queue.obliterate({ force: true });
      rows.push(await stageAll(tusk, o.jobs));
      rows.push(
        await drainAll(tusk, 'drain → BullMQ', bullmqSink({ connection: o.redisUrl, queue: QUEUE }), batchSize),
      );
      const inBullMQ = await queue.getWaitingCount();
      if (inBullMQ !== o.jobs) throw new Error(`BullMQ holds ${inBullMQ} jobs, expected ${o.jobs}`);
    }

    rows.push(await stageAll(tusk, o.jobs));
    rows.push(await drainAll(tusk, "drain → Tusk ('tusk' sink)", 'tusk', 1000));
    const { rows: moved } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${SCHEMA}".jobs`);
    if (moved[0]?.n !== o.jobs) throw new Error(`Tusk holds ${moved[0]?.n} jobs, expected ${o.jobs}`);

    // BullMQ's own bulk add of the same jobs, 1 000 per call: the sink's cost alone
    await queue.obliterate({ force: true });
    const t0 = performance.now();
    for (let i = 0; i < o.jobs; i += 1000) {
      const size = Math.min(1000, o.jobs - i);
      await queue.addBulk(Array.from({ length: size }, (_, k) => ({ name: 'notify', data: payload(i + k) })));
      status(`drain · BullMQ addBulk ${(i + size).toLocaleString('en')} / ${o.jobs.toLocaleString('en')}`);
    }
    const ms = performance.now() - t0;
    rows.push({
      what: 'BullMQ addBulk alone (no staging)',
      batchSize: 1000,
      jobs: o.jobs,
      ms,
      jobsPerSec: (o.jobs * 1000) / ms,
    });
    statusDone();

    const server = await serverInfo(o.url);
    console.log(
      `\nStaged drain: ${o.jobs.toLocaleString('en')} jobs staged, then forwarded by one drainer ` +
        `(PostgreSQL ${server.server_version}, Redis ${o.redisUrl})\n`,
    );
    console.log(
      renderTable(
        ['step', 'batch', 'jobs', 'seconds', 'jobs/s'],
        rows.map((r) => [r.what, r.batchSize ?? '', r.jobs, (r.ms / 1000).toFixed(2), Math.round(r.jobsPerSec)]),
      ),
    );
    console.log(
      '\nA drain batch: read the oldest staged rows, send them to the sink, delete them once the sink has them. ' +
        'To BullMQ: one addBulk (a Redis MULTI) per batch; to Tusk: in one transaction (COPY into jobs).',
    );
    const file = await saveResults('drain', { options: { ...o, url: undefined }, server, rows });
    console.log(`\nresults: ${file}`);
  } finally {
    statusDone();
    await tusk?.close().catch(() => {});
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close().catch(() => {});
    await redis.quit().catch(() => {});
    await dropSchema(pool, SCHEMA).catch(() => {});
    await pool.end();
  }
}
