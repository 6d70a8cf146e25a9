import type { Database } from '../db/connection.js';
import type { Logger } from '../log.js';
import { maintainHistory } from '../queries/history.js';
import { maintain, type UpkeepResult } from '../queries/workers.js';
import { type FireResult, fireDueSchedules } from '../schedules/fire.js';

/** After a server restart, workers get this long to reconnect before their jobs are reaped. */
const RESTART_GRACE_MS = 10_000;
/** Rows deleted per retention transaction, and batches per pass before yielding. */
const HISTORY_BATCH = 10_000;
const HISTORY_BATCHES = 100;

/** What an upkeep needs from its Tusk instance. */
export interface UpkeepHost {
  schema: string;
  log: Logger;
  database(): Promise<Database>;
  forget(upkeep: Upkeep): void;
}

export interface UpkeepOptions {
  /**
   * Period of the queue's upkeep: crash recovery (expired leases, dead workers),
   * promotion of due jobs, expiry, history partitions, and schedule ticks (enqueued up to
   * max(1 s, twice this) ahead). Default 500 ms.
   */
  everyMs?: number;
  /** Period of history retention (deleting and dropping what is past it); default 60 s. */
  historyEveryMs?: number;
}

/** What one pass did; `null` parts were skipped because another process was doing them. */
export interface UpkeepReport {
  queue: UpkeepResult | null;
  schedules: FireResult | null;
  /** Finished jobs deleted by retention (history partitions dropped are logged). */
  historyDeleted: number | null;
}

/**
 * The queue's upkeep as one component: reaping expired leases and dead workers, promoting
 * due jobs, expiring old ones, keeping history partitions ahead, retention, and schedule
 * ticks. Every long-lived Tusk process runs one (workers, `tusk serve`, `tusk drain`,
 * `tusk upkeep`); each kind of work is done by one process at a time (advisory locks),
 * so running many costs a lock probe each. Tests drive it with `runOnce()`.
 *
 * @example
 * const upkeep = tusk.upkeep();
 * await upkeep.runOnce(); // one pass now
 * upkeep.start();         // then every 500 ms
 * await upkeep.stop();
 */
export class Upkeep {
  readonly #host: UpkeepHost;
  readonly #everyMs: number;
  readonly #historyEveryMs: number;
  #timers: NodeJS.Timeout[] = [];
  #busy = new Set<string>();
  #running = false;
  #stopped = false;

  constructor(host: UpkeepHost, options: UpkeepOptions = {}) {
    this.#host = host;
    this.#everyMs = options.everyMs ?? 500;
    this.#historyEveryMs = options.historyEveryMs ?? 60_000;
  }

  /** One pass of everything, history retention included. */
  async runOnce(): Promise<UpkeepReport> {
    const db = await this.#host.database();
    const queue = await this.#queue(db);
    const schedules = await this.#schedules(db);
    const historyDeleted = await this.#history(db);
    return { queue, schedules, historyDeleted };
  }

  /** Runs the upkeep every `everyMs` (history retention at once, then every `historyEveryMs`). */
  start(): void {
    if (this.#running || this.#stopped) return;
    this.#running = true;
    const every = (ms: number, what: string, fn: (db: Database) => Promise<unknown>) => {
      const tick = () => void this.#once(what, fn);
      this.#timers.push(setInterval(tick, ms));
      return tick;
    };
    every(this.#everyMs, 'queue', (db) => this.#queue(db));
    every(this.#everyMs, 'schedules', (db) => this.#schedules(db));
    every(this.#historyEveryMs, 'history', (db) => this.#history(db))();
  }

  /**
   * Stops the timers and waits for a pass in progress, for `waitMs` at most (default 2 s):
   * a pass held up by a lock must not hold up a process's shutdown (it is rolled back when
   * the connection closes, and another process does it).
   */
  async stop(waitMs = 2000): Promise<void> {
    this.#stopped = true;
    this.#running = false;
    for (const timer of this.#timers) clearInterval(timer);
    this.#timers = [];
    const until = Date.now() + waitMs;
    while (this.#busy.size > 0 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10));
    this.#host.forget(this);
  }

  async #once(what: string, fn: (db: Database) => Promise<unknown>): Promise<void> {
    if (this.#busy.has(what) || !this.#running) return;
    this.#busy.add(what);
    try {
      await fn(await this.#host.database());
    } catch (error) {
      this.#host.log.error({ err: error }, `upkeep (${what}) failed; it runs again in a moment`);
    } finally {
      this.#busy.delete(what);
    }
  }

  async #queue(db: Database): Promise<UpkeepResult | null> {
    const done = await maintain(db.pool, this.#host.schema, RESTART_GRACE_MS);
    for (const failed of done?.errors ?? []) {
      this.#host.log.error(failed, `upkeep step ${failed.step} failed (the other steps ran): ${failed.message}`);
    }
    if (done && (done.released || done.dead || done.expired)) this.#host.log.debug(done, 'upkeep');
    return done;
  }

  /** Enqueues due schedule ticks, a little ahead so that their jobs start on time. */
  async #schedules(db: Database): Promise<FireResult | null> {
    const lookaheadMs = Math.max(1000, 2 * this.#everyMs);
    const done = await fireDueSchedules(db.pool, this.#host.schema, lookaheadMs);
    for (const { name, error } of done?.errors ?? []) {
      this.#host.log.warn({ err: error, schedule: name }, 'schedule skipped: its expression cannot be read');
    }
    if (done?.jobs) this.#host.log.debug(done, 'schedule ticks enqueued');
    return done;
  }

  /** Partitions ahead and retention, a batch per transaction, until done or for a while. */
  async #history(db: Database): Promise<number | null> {
    let deleted: number | null = null;
    for (let i = 0; i < HISTORY_BATCHES && !this.#stopped; i++) {
      const done = await maintainHistory(db.pool, this.#host.schema, HISTORY_BATCH);
      if (!done) return deleted;
      deleted = (deleted ?? 0) + done.deleted;
      if (done.dropped.length > 0 || done.deleted > 0) this.#host.log.info(done, 'history retention applied');
      if (!done.more) break;
    }
    return deleted;
  }
}
