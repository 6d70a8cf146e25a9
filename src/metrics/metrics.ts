import type pg from 'pg';
import { Counter, Gauge, Registry } from 'prom-client';
import { countWorkers, scrapeMetrics } from '../queries/metrics.js';
import { CountedHistogram } from './histogram.js';
import { LabelSets } from './labels.js';

/** Options of the `/metrics` endpoint. */
export interface MetricsOptions {
  /**
   * Events (claims, failures, finishes) are counted up to this long before the scrape,
   * leaving the transactions that wrote them time to commit. Default 5 000 ms.
   */
  lagMs?: number;
  /**
   * Label sets kept: (queue, tenant) pairs, and queues for the histograms. Any further
   * one is counted under `_other`. Default 500.
   */
  maxLabelSets?: number;
  /** A label set with no job and no event for this long is dropped, series and all. Default 3 600 000 (1 h). */
  staleAfterMs?: number;
}

export const DEFAULT_MAX_LABEL_SETS = 500;
export const DEFAULT_STALE_AFTER_MS = 3_600_000;

/** Bounds of the wait and run time histograms, in seconds. */
const BOUNDS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];
const UNFINISHED = ['scheduled', 'available', 'running', 'failed'];
const FINAL = ['succeeded', 'dead', 'cancelled', 'expired'] as const;

type Pair = { queue: string; tenant: string };

/**
 * Prometheus metrics of a Tusk schema, read from the database at each scrape, so they
 * cover every process that uses the schema, not just this one. Gauges are the state
 * now; counters and histograms add up what happened since this server started (a
 * restart starts them at zero, as Prometheus expects), read between scrapes.
 * Scrapes are serialised: two at once would count a window twice. Tenants choose queue
 * names, so the label sets are capped (`maxLabelSets`, the rest under `_other`) and
 * dropped when stale (`staleAfterMs`).
 */
export class TuskMetrics {
  readonly registry = new Registry();
  readonly #pool: () => Promise<pg.Pool>;
  readonly #schema: string;
  readonly #lagMs: number;
  /** Events before this time are counted already. */
  #since = new Date();
  #last: Promise<unknown> = Promise.resolve();
  /** (queue, tenant) pairs kept: their gauges read 0 rather than vanish when empty, until stale. */
  readonly #pairs: LabelSets<Pair>;
  /** Queues of the histograms. */
  readonly #queues: LabelSets<{ queue: string }>;

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
    const max = options.maxLabelSets ?? DEFAULT_MAX_LABEL_SETS;
    const staleAfterMs = options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS;
    this.#pairs = new LabelSets<Pair>(['queue', 'tenant'], max, staleAfterMs);
    this.#queues = new LabelSets<{ queue: string }>(['queue'], max, staleAfterMs);
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

    const now = Date.now();
    // stale sets go first, making room for new ones
    for (const pair of this.#pairs.sweep(now)) {
      this.#claimed.remove(pair);
      this.#failed.remove(pair);
      for (const state of FINAL) this.#finished.remove({ ...pair, state });
    }
    for (const queue of this.#queues.sweep(now)) {
      this.#wait.remove(queue);
      this.#run.remove(queue);
    }
    const pairOf = (row: Pair) => this.#pairs.admit({ queue: row.queue, tenant: row.tenant }, now);
    const gauges = scrape.gauges.map((g) => ({ ...g, pair: pairOf(g) }));
    const events = scrape.events.map((e) => ({ ...e, pair: pairOf(e) }));

    this.#jobs.reset();
    this.#oldest.reset();
    for (const pair of this.#pairs.all()) {
      for (const state of UNFINISHED) this.#jobs.set({ ...pair, state }, 0);
      this.#oldest.set(pair, 0);
    }
    // pairs folded into _other add up, and its oldest job is the oldest of theirs
    const oldest = new Map<Pair, number>();
    for (const g of gauges) {
      this.#jobs.inc({ ...g.pair, state: g.state }, g.n);
      if (g.oldest_s !== null) oldest.set(g.pair, Math.max(oldest.get(g.pair) ?? 0, g.oldest_s));
    }
    for (const [pair, seconds] of oldest) this.#oldest.set(pair, seconds);
    this.#workersAlive.set(workers.alive);
    this.#workersRegistered.set(workers.registered);

    for (const e of events) {
      this.#claimed.inc(e.pair, e.started);
      this.#failed.inc(e.pair, e.failed_attempts);
      for (const state of FINAL) this.#finished.inc({ ...e.pair, state }, e[state]);
    }
    for (const t of scrape.timings) {
      const queue = this.#queues.admit({ queue: t.queue }, now);
      (t.kind === 'wait' ? this.#wait : this.#run).add(queue, t.bucket, t.n, t.sum_ms / 1000);
    }
    return this.registry.metrics();
  }
}
