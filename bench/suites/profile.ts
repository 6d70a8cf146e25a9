// Where a tuned drain's time goes: the worker's CPU (this process) against its PostgreSQL
// backends' CPU (read from /proc: the server must run on this machine), and what the
// backends do, sampled every 20 ms from pg_stat_activity: waiting (and on what) or on CPU,
// and in which statement. Answers "what bounds the drain": the worker, or which query.
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { dropSchema } from '../../src/migrate/migrate.js';
import { drainCeiling } from '../lib/ceilings.js';
import { cpuSeconds, cpuTotal } from '../lib/cpu.js';
import { serverInfo, status, statusDone } from '../lib/env.js';
import { Tusk } from '../lib/tusk.js';
import { TUSK_TUNED } from '../peers/tusk.js';

export interface ProfileOptions {
  url: string;
  jobs: number;
}

const SCHEMA = 'bench_profile';
const SAMPLE_MS = 20;

const byCount = (m: Map<string, number>, samples: number) =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([what, n]) => [what, (n / samples).toFixed(2)]);

export async function profile(o: ProfileOptions): Promise<void> {
  const observer = new pg.Pool({ connectionString: o.url, max: 1 });
  const server = await serverInfo(o.url);
  await dropSchema(observer, SCHEMA);
  const tusk = new Tusk({ connectionString: o.url, schema: SCHEMA, logger: false, maxConnections: 12 });
  try {
    await tusk.migrate();
    for (let i = 0; i < o.jobs; i += 10_000) {
      status(`profile · enqueue ${i.toLocaleString('en')}/${o.jobs.toLocaleString('en')}`);
      const n = Math.min(10_000, o.jobs - i);
      await tusk.enqueueMany(Array.from({ length: n }, (_, k) => ({ task: 'noop', payload: { i: i + k } })));
    }
    statusDone();
    await observer.query(`VACUUM ANALYZE "${SCHEMA}".jobs`);
    const waits = new Map<string, number>();
    const statements = new Map<string, number>();
    const backends = new Map<number, { first: number; last: number }>();
    let samples = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await observer.query<{ pid: number; state: string; wait: string | null; query: string }>(
          `SELECT pid, state, wait_event_type || ':' || wait_event AS wait,
                  left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS query
           FROM pg_stat_activity
           WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND query LIKE $1`,
          [`%${SCHEMA}%`],
        );
        samples++;
        for (const r of rows) {
          const cpu = cpuSeconds(r.pid);
          if (cpu !== null) {
            const seen = backends.get(r.pid);
            if (seen) seen.last = cpu;
            else backends.set(r.pid, { first: cpu, last: cpu });
          }
          if (r.state !== 'active') continue;
          waits.set(r.wait ?? 'on CPU', (waits.get(r.wait ?? 'on CPU') ?? 0) + 1);
          statements.set(r.query, (statements.get(r.query) ?? 0) + 1);
        }
        await new Promise((resolve) => setTimeout(resolve, SAMPLE_MS));
      }
    })();
    let done = 0;
    let drained = () => {};
    const all = new Promise<void>((resolve) => {
      drained = resolve;
    });
    const worker = tusk.worker({
      ...TUSK_TUNED,
      tasks: {
        noop: () => {
          if (++done === o.jobs) drained();
        },
      },
    });
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await worker.start();
    while (done < o.jobs) {
      status(`profile · drained ${done.toLocaleString('en')}/${o.jobs.toLocaleString('en')}`);
      await Promise.race([all, new Promise((resolve) => setTimeout(resolve, 500))]);
    }
    statusDone();
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    await worker.stop();
    sampling = false;
    await sampler;
    const workerCpu = cpuTotal(cpu);
    const backendCpu = [...backends.values()].reduce((sum, b) => sum + (b.last - b.first), 0);
    const share = (s: number) => `${s.toFixed(2)} s (${Math.round((100 * s) / seconds)} % of a core)`;
    console.log(
      `Profile of a tuned drain: ${o.jobs.toLocaleString('en')} no-op jobs, one worker (${Object.entries(TUSK_TUNED)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}) in this process; PostgreSQL ${server.server_version}\n`,
    );
    console.log(`drained in ${seconds.toFixed(2)} s: ${Math.round(o.jobs / seconds).toLocaleString('en')} jobs/s`);
    console.log(`worker process CPU      ${share(workerCpu)}`);
    console.log(
      `PostgreSQL backends CPU ${backends.size > 0 ? share(backendCpu) : 'not readable here (the server is on another machine)'}\n`,
    );
    console.log(`active backends, average over ${samples} samples ${SAMPLE_MS} ms apart:\n`);
    console.log(renderTable(['waiting on', 'backends'], byCount(waits, samples)));
    console.log();
    console.log(renderTable(['statement', 'backends'], byCount(statements, samples)));
    await ceilingBound(o, { seconds, workerCpu, backendCpu: backends.size > 0 ? backendCpu : null });
  } finally {
    await tusk.close();
    await dropSchema(observer, SCHEMA);
    await observer.end();
  }
}

/**
 * The ceiling keeping history, its CPU a job beside the drain's, and what that bounds: a
 * drain whose server work were no more than the ceiling's, with this worker's CPU a job,
 * cannot pass all cores divided by the two costs added. It is an upper bound (waits on
 * I/O and locks only lower it), so a drain goal above it is out of reach on this machine.
 */
async function ceilingBound(
  o: ProfileOptions,
  drain: { seconds: number; workerCpu: number; backendCpu: number | null },
): Promise<void> {
  const c = await drainCeiling(o.url, o.jobs, true, (s) => status(`profile · ceiling keeping history · ${s}`));
  statusDone();
  const us = (s: number | null, jobs: number) => (s === null ? null : (1e6 * s) / jobs);
  const f = (v: number | null) => (v === null ? '-' : v.toFixed(1));
  const rate = (jobs: number, s: number) => Math.round(jobs / s);
  const tusk = {
    rate: rate(o.jobs, drain.seconds),
    server: us(drain.backendCpu, o.jobs),
    client: us(drain.workerCpu, o.jobs),
  };
  const ceiling = {
    rate: rate(c.done, c.ms / 1000),
    server: us(c.backendCpu, c.done),
    client: us(c.clientCpu, c.done),
  };
  console.log(
    `\nCPU a job, beside the ceiling that keeps history (${c.done.toLocaleString('en')} jobs, 4 connections × 500):\n`,
  );
  console.log(
    renderTable(
      ['drain', 'jobs/s', 'server µs a job', 'client µs a job'],
      [
        ['Tusk tuned', String(tusk.rate), f(tusk.server), f(tusk.client)],
        ['ceiling keeping history', String(ceiling.rate), f(ceiling.server), f(ceiling.client)],
      ],
    ),
  );
  if (ceiling.server === null || tusk.client === null) return;
  const cores = availableParallelism();
  const bound = Math.round((cores * 1e6) / (ceiling.server + tusk.client));
  console.log(
    `\nBound on ${cores} cores: a drain whose server work cost what the ceiling's does, with this worker's ${f(tusk.client)} µs a job,` +
      `\nruns at most ${cores} × 10^6 / (${f(ceiling.server)} + ${f(tusk.client)}) = ${bound.toLocaleString('en')} jobs/s,` +
      ` ${(bound / ceiling.rate).toFixed(2)} of the ceiling's rate in this run.`,
  );
  // the peers suite's goal: a tuned drain at half the ceiling's rate
  const half = ceiling.rate / 2;
  const budget = (cores * 1e6) / half;
  console.log(
    `Half the ceiling's rate (${Math.round(half).toLocaleString('en')} jobs/s) leaves ${f(budget)} µs of CPU a job on ${cores} cores:` +
      ` with this worker's ${f(tusk.client)}, the server's share must be at most ${f(budget - tusk.client)} µs` +
      ` (this drain's: ${f(tusk.server)}).`,
  );
}
