import type pg from 'pg';
import { Counter, Gauge, Registry } from 'prom-client';
import { countWorkers, scrapeMetrics } from '../queries/metrics.js';
import { CountedHistogram } from './histogram.js';

/** Options of the `/metrics` endpoint. */
export interface MetricsOptions {
  /**
   * Events (claims, failures, finishes) are counted up to this long before the scrape,
   * leaving the transactions that wrote them time to commit. Default 5 000 ms.
   */
  lagMs?: number;
}

/** Bounds of the wait and run time histograms, in seconds. */
const BOUNDS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];
const UNFINISHED = ['scheduled', 'available', 'running', 'failed'];

/**
 * Prometheus metrics of a Tusk schema, read from the database at each scrape, so they
 * cover every process that uses the schema, not just this one. Gauges are the state
 * now; counters and histograms add up what happened since this server started (a
 * restart starts them at zero, as Prometheus expects), read between scrapes.
 * Scrapes are serialised: two at once would count a window twice.
 */
export class TuskMetrics {
  readonly registry = new Registry();
  readonly #pool: () => Promise<pg.Pool>;
  readonly #schema: string;
  readonly #lagMs: number;
  /** Events before this time are counted already. */
  #since = new Date();
  #last: Promise<unknown> = Promise.resolve();
  /** (queue, tenant) pairs seen with jobs: their gauges read 0 rather than vanish when empty. */
  readonly #seen = new Map<string, { queue: string; tenant: string }>();

  readonly #jobs = new Gauge({
    name: 'tusk_jobs',
    help: 'Unfinished jobs now, by queue, tenant and state (scheduled, available, running, failed = waiting to retry)',
    labelNames: ['queue', 'tenant', 'state'],
    registers: [this.registry],
  });
  readonly #oldest = new Gauge({
    name: 'tusk_oldest_waiting_seconds',
    help: 'Age of the oldest job that could run now (available), by queue and tenant; 0 when none waits',
    labelNames: ['queue', 'tenant'],
    registers: [this.registry],
  });
  readonly #workersAlive = new Gauge({
    name: 'tusk_workers_alive',
    help: 'Workers whose process and connection are up (their session lock is held)',
    registers: [this.registry],
  });
  readonly #workersRegistered = new Gauge({
    name: 'tusk_workers_registered',
    help: 'Workers registered, alive or dead and not yet cleaned up',
    registers: [this.registry],
  });
  readonly #claimed = new Counter({
    name: 'tusk_jobs_claimed_total',
    help: 'Attempts started (claims by workers and fetch), by queue and tenant',
    labelNames: ['queue', 'tenant'],
    registers: [this.registry],
  });
  readonly #failed = new Counter({
    name: 'tusk_jobs_failed_total',
    help: 'Failed attempts (retried or not), by queue and tenant',
    labelNames: ['queue', 'tenant'],
    registers: [this.registry],
  });
  readonly #finished = new Counter({
    name: 'tusk_jobs_finished_total',
    help: 'Jobs that reached a final state (succeeded, dead, cancelled, expired), by queue, tenant and state',
    labelNames: ['queue', 'tenant', 'state'],
    registers: [this.registry],
  });
  readonly #wait = new CountedHistogram(
    'tusk_job_wait_seconds',
    'Time from when finished jobs could run to the start of their last attempt, by queue',
    BOUNDS_S,
  );
  readonly #run = new CountedHistogram(
    'tusk_job_run_seconds',
    'Run time of the last attempt of finished jobs, by queue',
    BOUNDS_S,
  );

  constructor(pool: () => Promise<pg.Pool>, schema: string, options: MetricsOptions = {}) {
    this.#pool = pool;
    this.#schema = schema;
    this.#lagMs = options.lagMs ?? 5_000;
    this.registry.registerMetric(this.#wait.asMetric());
    this.registry.registerMetric(this.#run.asMetric());
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** Reads the database and renders every metric in Prometheus' text format. */
  render(): Promise<string> {
    const next = this.#last.catch(() => {}).then(() => this.#scrape());
    this.#last = next;
    return next;
  }

  async #scrape(): Promise<string> {
    const pool = await this.#pool();
    const [scrape, workers] = await Promise.all([
      scrapeMetrics(
        pool,
        this.#schema,
        this.#since,
        this.#lagMs,
        BOUNDS_S.map((s) => s * 1000),
      ),
      countWorkers(pool, this.#schema),
    ]);
    // a scrape within the lag of the start reads an empty window: the start stays
    if (scrape.upper > this.#since) this.#since = scrape.upper;

    this.#jobs.reset();
    this.#oldest.reset();
    for (const { queue, tenant } of [...scrape.gauges, ...scrape.events]) {
      this.#seen.set(JSON.stringify([queue, tenant]), { queue, tenant });
    }
    for (const { queue, tenant } of this.#seen.values()) {
      for (const state of UNFINISHED) this.#jobs.set({ queue, tenant, state }, 0);
      this.#oldest.set({ queue, tenant }, 0);
    }
    for (const g of scrape.gauges) {
      this.#jobs.set({ queue: g.queue, tenant: g.tenant, state: g.state }, g.n);
      if (g.oldest_s !== null) this.#oldest.set({ queue: g.queue, tenant: g.tenant }, g.oldest_s);
    }
    this.#workersAlive.set(workers.alive);
    this.#workersRegistered.set(workers.registered);

    for (const e of scrape.events) {
      const labels = { queue: e.queue, tenant: e.tenant };
      this.#claimed.inc(labels, e.started);
      this.#failed.inc(labels, e.failed_attempts);
      for (const state of ['succeeded', 'dead', 'cancelled', 'expired'] as const) {
        this.#finished.inc({ ...labels, state }, e[state]);
      }
    }
    for (const t of scrape.timings) {
      (t.kind === 'wait' ? this.#wait : this.#run).add({ queue: t.queue }, t.bucket, t.n, t.sum_ms / 1000);
    }
    return this.registry.metrics();
  }
}
