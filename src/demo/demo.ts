import { relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import { renderTable } from '../cli/table.js';
import { startEmbedded } from '../db/embedded.js';
import { TuskValidationError } from '../errors.js';
import { DEMO_SCHEMA, dropDemoSchema, markDemoSchema } from '../migrate/migrate.js';
import { countByState, firstJobId, summarizeHistory } from '../queries/stats.js';
import { Tusk } from '../tusk.js';
import type { JobSpec } from '../types.js';
import type { Tasks } from '../worker/options.js';
import { bar, Progress } from './progress.js';

export interface DemoOptions {
  /** Connection string; default DATABASE_URL, else the embedded server. */
  connectionString?: string;
  /** Schema the demo drops and makes again at each run (one it made, or none); default `tusk_demo`. */
  schema?: string;
  /** Jobs to enqueue; default 3000 (400 with `quick`). */
  jobs?: number;
  /** A short run for CI: fewer, shorter jobs. */
  quick?: boolean;
  out?: NodeJS.WriteStream;
}

/** What the demo did, for callers that check it. */
export interface DemoResult {
  jobs: number;
  succeeded: number;
  dead: number;
  seconds: number;
}

/** Tenants and their slots: acme pays for 6 concurrent jobs, hooli for 2, ... */
const SLOTS: Record<string, number> = { acme: 6, globex: 4, initech: 3, umbrella: 3, hooli: 2 };
const TENANTS = Object.keys(SLOTS);

/** How to run this CLI again: `npx tusk` in an app, `node dist/cli/main.js` in this repository. */
function cliCommand(): string {
  const script = process.argv[1] ?? '';
  return script.includes('node_modules') || !script.endsWith('main.js')
    ? 'npx tusk'
    : `node ${relative(process.cwd(), script)}`;
}
/** A path relative to the working directory when it is inside it. */
function shortPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') ? `./${rel}` : path;
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const between = (min: number, max: number) => min + Math.random() * (max - min);

/**
 * Tusk's demo: enqueues a few thousand jobs for several tenants and queues (some fail
 * and retry, a few end dead), runs two workers, shows live progress, and ends with a
 * summary per tenant and queue.
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const out = options.out ?? process.stdout;
  const quick = options.quick ?? false;
  const total = options.jobs ?? (quick ? 400 : 3000);
  const schema = options.schema ?? DEMO_SCHEMA;
  const scale = quick ? 0.25 : 1;
  const url = options.connectionString ?? process.env.DATABASE_URL;
  // no URL: the demo starts the embedded server itself, to say where it is (and what
  // running as root took: a copy of the binaries, a data folder the postgres user can reach)
  const say = (_: object, msg?: string) => void (msg && out.write(`${msg}\n`));
  const embedded = url ? null : await startEmbedded({}, { debug() {}, info: say, warn: say, error: say });
  const tusk = new Tusk({
    schema,
    logger: false,
    connectionString: url ?? embedded?.connectionString,
  });
  try {
    const pool = await tusk.pool();
    const where = embedded ? `an embedded PostgreSQL in ${shortPath(embedded.dataDir)}` : 'your database';
    out.write(
      `Tusk demo: ${total} jobs for ${TENANTS.length} tenants on 2 queues, in schema "${schema}" of ${where}\n`,
    );
    if (!(await dropDemoSchema(pool, schema))) {
      throw new TuskValidationError(
        'schema',
        `"${schema}" is not a schema the demo made, and the demo drops its schema at each run: ` +
          `choose another (default ${DEMO_SCHEMA}), or, if an earlier version's demo made it, drop it first ` +
          `(DROP SCHEMA "${schema}" CASCADE)`,
      );
    }
    await tusk.migrate();
    await markDemoSchema(pool, schema);
    for (const [tenant, slots] of Object.entries(SLOTS)) await tusk.tenants.set(tenant, { slots });
    out.write(
      `Tenant slots: ${TENANTS.map((t) => `${t} ${SLOTS[t]}`).join(', ')} (at most that many of their jobs run at once)\n`,
    );

    const tasks: Tasks = {
      render_report: async (p: { rows: number }, ctx) => {
        await sleep(between(10, 60) * scale);
        ctx.stats({ rows: p.rows });
        return { url: `https://reports.example/${ctx.job.id}.pdf` };
      },
      send_email: async (_p, ctx) => {
        await sleep(between(2, 10) * scale);
        ctx.stats({ recipients: 1 });
        return { delivered: true };
      },
      sync_crm: {
        // a flaky upstream: 40 % of attempts fail, retried 100 ms later
        handler: async () => {
          await sleep(between(5, 20) * scale);
          if (Math.random() < 0.4) throw new Error('CRM answered 503 Service Unavailable');
          return { synced: true };
        },
        retry: { backoff: 100 },
      },
      import_csv: {
        // a bad file: always fails, dead after its 3 attempts
        handler: async () => {
          await sleep(5 * scale);
          throw new Error('line 1: expected 7 columns, found 3');
        },
        retry: { backoff: 50 },
      },
    };
    const jobs: JobSpec[] = Array.from({ length: total }, (_, i) => {
      const tenant = TENANTS[i % TENANTS.length] as string;
      const roll = Math.random();
      if (roll < 0.01) return { task: 'import_csv', payload: { file: `upload-${i}.csv` }, tenant, maxAttempts: 3 };
      if (roll < 0.3)
        return { task: 'send_email', payload: { to: `user${i}@${tenant}.example` }, tenant, queue: 'critical' };
      if (roll < 0.45) return { task: 'sync_crm', payload: { account: i }, tenant };
      if (roll < 0.5)
        return { task: 'render_report', payload: { rows: i }, tenant, delayMs: Math.round(between(200, 1500)) };
      return { task: 'render_report', payload: { rows: i * 10 }, tenant };
    });
    await tusk.enqueueMany(jobs);
    out.write('Enqueued in one statement. Starting 2 workers (concurrency 8 each)...\n');

    const started = performance.now();
    const workers = [tusk.worker({ tasks, concurrency: 8 }), tusk.worker({ tasks, concurrency: 8 })];
    await Promise.all(workers.map((w) => w.start()));
    const progress = new Progress(out);
    let finished = 0;
    let counts = new Map<string, number>();
    while (finished < total) {
      await sleep(200);
      counts = new Map();
      for (const row of await countByState(pool, schema)) counts.set(row.state, (counts.get(row.state) ?? 0) + row.n);
      finished = ['succeeded', 'dead', 'cancelled', 'expired'].reduce((n, s) => n + (counts.get(s) ?? 0), 0);
      const seconds = (performance.now() - started) / 1000;
      progress.update(
        `${bar(finished / total)} ${finished}/${total} done · running ${counts.get('running') ?? 0} · ` +
          `waiting ${(counts.get('available') ?? 0) + (counts.get('scheduled') ?? 0)} · ` +
          `retrying ${counts.get('failed') ?? 0} · dead ${counts.get('dead') ?? 0} · ${Math.round(finished / seconds)} jobs/s`,
      );
    }
    const seconds = (performance.now() - started) / 1000;
    progress.done(`${bar(1)} ${total}/${total} done in ${seconds.toFixed(1)} s`);
    await Promise.all(workers.map((w) => w.stop()));

    const summary = await summarizeHistory(pool, schema);
    out.write(
      `\n${renderTable(
        [
          'tenant',
          'queue',
          'succeeded',
          'after retry',
          'dead',
          'wait p50 ms',
          'wait p95 ms',
          'run p50 ms',
          'run p95 ms',
        ],
        summary.map((r) => [
          r.tenant,
          r.queue,
          r.succeeded,
          r.retried,
          r.dead,
          r.wait_p50,
          r.wait_p95,
          r.run_p50,
          r.run_p95,
        ]),
      )}\n\n`,
    );
    const dead = await firstJobId(pool, schema, 'dead');
    out.write(
      `Every job is kept, with its attempts' errors: try\n` +
        `  ${cliCommand()} status ${dead ?? '<id>'} --schema ${schema}\n` +
        `  SELECT * FROM ${schema}.job_history ORDER BY finished_at DESC LIMIT 5;\n`,
    );
    return { jobs: total, succeeded: counts.get('succeeded') ?? 0, dead: counts.get('dead') ?? 0, seconds };
  } finally {
    await tusk.close();
    await embedded?.stop();
  }
}
