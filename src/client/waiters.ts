import type { Database } from '../db/connection.js';
import { Listener } from '../db/listener.js';
import { channels } from '../db/schema.js';
import type { Logger } from '../log.js';
import type { JobState } from '../types.js';

/** What the event stream tells of jobs: that they finished, that their progress changed. */
export type JobEvent = 'finished' | 'progress';

const FINAL: ReadonlySet<JobState> = new Set(['succeeded', 'dead', 'cancelled', 'expired']);

interface Waiter<J> {
  resolve(job: J | null): void;
  timer: NodeJS.Timeout;
}

/**
 * Waiters for jobs to finish, all on one listening connection whatever their number: a
 * job's end is announced on the schema's `done` channel (see finish_jobs); the job is then
 * read once for all its waiters. The connection opens with the first waiter; the Tusk
 * instance's close() closes it.
 */
export class Waiters<J extends { state: JobState }> {
  readonly #waiting = new Map<string, Set<Waiter<J>>>();
  readonly #subscribers: Record<JobEvent, Set<(ids: string[]) => void>> = { finished: new Set(), progress: new Set() };
  readonly #database: () => Promise<Database>;
  readonly #read: (id: string) => Promise<J | null>;
  readonly #schema: string;
  readonly #log: Logger;
  #listener: Promise<Listener> | null = null;

  constructor(options: {
    schema: string;
    log: Logger;
    database: () => Promise<Database>;
    read: (id: string) => Promise<J | null>;
  }) {
    this.#schema = options.schema;
    this.#log = options.log;
    this.#database = options.database;
    this.#read = options.read;
  }

  /** The job once finished, or as it is when `timeoutMs` has passed; null for an unknown id. */
  async wait(id: string, timeoutMs: number): Promise<J | null> {
    await this.#listen();
    return new Promise<J | null>((resolve) => {
      const waiter: Waiter<J> = {
        resolve,
        timer: setTimeout(() => {
          this.#remove(id, waiter);
          this.#read(id).then(resolve, () => resolve(null));
        }, timeoutMs),
      };
      const set = this.#waiting.get(id) ?? new Set<Waiter<J>>();
      set.add(waiter);
      this.#waiting.set(id, set);
      // listening and registered first, then reading: an end announced meanwhile is not missed
      void this.#settle(id);
    });
  }

  /**
   * Calls `fn` with the ids of every batch of jobs that finishes (`finished`) or whose
   * progress was written (`progress`), until the returned function is called.
   */
  async subscribe(event: JobEvent, fn: (ids: string[]) => void): Promise<() => void> {
    const listener = await this.#listen();
    // progress is announced at every heartbeat of a reporting job: heard only once asked for
    if (event === 'progress') await listener.listen(channels(this.#schema).progress);
    this.#subscribers[event].add(fn);
    return () => this.#subscribers[event].delete(fn);
  }

  /** Waiting jobs now, for tests and metrics. */
  get size(): number {
    return this.#waiting.size;
  }

  async close(): Promise<void> {
    const listener = await this.#listener?.catch(() => null);
    this.#listener = null;
    await listener?.stop();
    for (const [id, set] of this.#waiting) {
      for (const w of set) {
        clearTimeout(w.timer);
        this.#read(id).then(w.resolve, () => w.resolve(null));
      }
    }
    this.#waiting.clear();
  }

  #listen(): Promise<Listener> {
    this.#listener ??= (async () => {
      const db = await this.#database();
      const names = channels(this.#schema);
      const listener = new Listener({
        label: 'waitFor',
        clientConfig: { ...db.clientConfig, application_name: `tusk waiters pid=${process.pid}` },
        channels: [names.done],
        log: this.#log,
        onNotification: (channel, payload) => {
          const ids = payload.split(',');
          if (channel === names.progress) {
            for (const fn of this.#subscribers.progress) fn(ids);
            return;
          }
          for (const id of ids) if (this.#waiting.has(id)) void this.#settle(id);
          for (const fn of this.#subscribers.finished) fn(ids);
        },
        // announcements may have been missed while the connection was down: look again
        onConnect: async () => {
          for (const id of this.#waiting.keys()) void this.#settle(id);
        },
        onDisconnect: () => {},
      });
      await listener.start();
      return listener;
    })();
    this.#listener.catch(() => {
      this.#listener = null;
    });
    return this.#listener;
  }

  async #settle(id: string): Promise<void> {
    let job: J | null;
    try {
      job = await this.#read(id);
    } catch (error) {
      this.#log.warn({ err: error, job: id }, 'waitFor: could not read a finished job; its waiters wait on');
      return;
    }
    if (job && !FINAL.has(job.state)) return;
    for (const w of this.#waiting.get(id) ?? []) {
      clearTimeout(w.timer);
      w.resolve(job);
    }
    this.#waiting.delete(id);
  }

  #remove(id: string, waiter: Waiter<J>): void {
    const set = this.#waiting.get(id);
    set?.delete(waiter);
    if (set?.size === 0) this.#waiting.delete(id);
  }
}
