import { EventEmitter } from 'node:events';
import type { Database } from '../db/connection.js';
import { isConnectionError } from '../errors.js';
import type { Logger } from '../log.js';
import type { UpkeepResult } from '../queries/upkeep.js';
import type { FireResult } from '../schedules/fire.js';
import { HistoryService } from './historyService.js';
import { QueueService } from './queueService.js';
import { ScheduleService } from './scheduleService.js';
import type { UpkeepService } from './service.js';

/** What an upkeep needs from its Tusk instance. */
export interface UpkeepHost {
  schema: string;
  log: Logger;
  database(): Promise<Database>;
  forget(upkeep: Upkeep): void;
  /** True while the timed passes must wait (a worker's, while the worker is not registered). */
  paused?(): boolean;
}

/** Options of `tusk.upkeep()`: the periods of its passes. */
export interface UpkeepOptions {
  /**
   * Period of the queue's upkeep: crash recovery (expired leases, dead workers),
   * promotion of due jobs, expiry, history partitions, and schedule ticks (enqueued up to
   * max(1 s, twice this) ahead). Default 500 ms.
   */
  everyMs?: number;
  /**
   * Period of history retention (deleting and dropping what is past it), and of summarizing
   * the history's index on the finish time that metrics read through; default 60 s.
   */
  historyEveryMs?: number;
}

/** The events of an upkeep: `pass` after each service's pass (its result, or the error that failed it). */
export interface UpkeepEvents {
  pass: [{ service: string; result: unknown; error?: unknown }];
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
export class Upkeep extends EventEmitter<UpkeepEvents> {
  readonly #host: UpkeepHost;
  readonly #queue: QueueService;
  readonly #schedules: ScheduleService;
  readonly #history: HistoryService;
  #timers: NodeJS.Timeout[] = [];
  #busy = new Set<string>();
  #running = false;
  #stopped = false;

  constructor(host: UpkeepHost, options: UpkeepOptions = {}) {
    super();
    this.#host = host;
    const ctx = { schema: host.schema, log: host.log };
    const everyMs = options.everyMs ?? 500;
    this.#queue = new QueueService(ctx, everyMs);
    this.#schedules = new ScheduleService(ctx, everyMs);
    this.#history = new HistoryService(ctx, options.historyEveryMs ?? 60_000, () => this.#stopped);
  }

  /** One pass of everything, history retention included. */
  async runOnce(): Promise<UpkeepReport> {
    const db = await this.#host.database();
    const queue = await this.#pass(this.#queue, db);
    const schedules = await this.#pass(this.#schedules, db);
    const historyDeleted = await this.#pass(this.#history, db);
    return { queue, schedules, historyDeleted };
  }

  /** Runs each service every its period (history retention at once, then every `historyEveryMs`). */
  start(): void {
    if (this.#running || this.#stopped) return;
    this.#running = true;
    const every = (service: UpkeepService<unknown>) => {
      const tick = () => void this.#once(service);
      this.#timers.push(setInterval(tick, service.everyMs));
      return tick;
    };
    every(this.#queue);
    every(this.#schedules);
    every(this.#history)();
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

  /** A timed pass: skipped while the last one of that service runs; a failure is logged. */
  async #once(service: UpkeepService<unknown>): Promise<void> {
    if (this.#busy.has(service.name) || !this.#running || this.#host.paused?.()) return;
    this.#busy.add(service.name);
    try {
      await this.#pass(service, await this.#host.database());
    } catch (error) {
      // a lost connection (a failover, a terminated backend) is the database's, and passing:
      // a warning; anything else is a fault
      const level = isConnectionError(error) ? 'warn' : 'error';
      this.#host.log[level]({ err: error }, `upkeep (${service.name}) failed; it runs again in a moment`);
    } finally {
      this.#busy.delete(service.name);
    }
  }

  /** A pass of one service, announced as a `pass` event (what tests wait for, not time). */
  async #pass<R>(service: UpkeepService<R>, db: Database): Promise<R | null> {
    try {
      const result = await service.runOnce(db);
      this.emit('pass', { service: service.name, result });
      return result;
    } catch (error) {
      this.emit('pass', { service: service.name, result: null, error });
      throw error;
    }
  }
}
