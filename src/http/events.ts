import type { JobEvent } from '../client/waiters.js';
import { type FinishedJob, selectFinished } from '../queries/finishedEvents.js';
import { type ProgressEvent, selectProgress } from '../queries/progress.js';
import type { Api } from './api.js';
import { CallerLimit } from './callerLimit.js';

/** Event streams one caller (one token) may hold open at once. */
export const MAX_STREAMS_PER_CALLER = 16;
/** Batches a stream may have unsent: past it the client is not reading, and its stream ends at once, its connection closed. */
export const MAX_UNSENT_BATCHES = 1000;

/** A batch of events as a stream sends them: every row has its tenant. */
export type EventRows = ReadonlyArray<FinishedJob | ProgressEvent>;

/** One open event stream: its tenant (null: every tenant's) and where its batches go. */
export interface EventStream {
  tenant: string | null;
  push(event: JobEvent, rows: EventRows): void;
  /** Events were lost (a batch could not be read): the stream ends, its client looks again. */
  end(): void;
}

/**
 * The server's one reader of job events for all its event streams: each batch of ids
 * announced (finished, progress) is read once, on the searches' connections, whatever
 * the number of streams, and each stream is handed its tenant's rows. (A read per stream
 * let one tenant's open streams turn every other tenant's job ends into as many queries.)
 * Batches are read one at a time, in the order announced.
 */
export class EventFeed {
  readonly #api: Api;
  readonly #streams = new Set<EventStream>();
  readonly #perCaller = new CallerLimit(MAX_STREAMS_PER_CALLER, 'too_many_streams', 'event streams');
  #subscription: Promise<Array<() => void>> | null = null;
  #reading: Promise<void> = Promise.resolve();

  constructor(api: Api) {
    this.#api = api;
  }

  /**
   * Adds a stream of the caller `key` (null: the admin, not counted); returns the function
   * that removes it. Refused with a 429 when the caller holds MAX_STREAMS_PER_CALLER already.
   */
  async open(key: string | null, stream: EventStream): Promise<() => void> {
    const release = this.#perCaller.take(key);
    this.#streams.add(stream);
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      this.#streams.delete(stream);
      release();
      if (this.#streams.size === 0) this.#unsubscribe();
    };
    try {
      await this.#subscribe();
    } catch (error) {
      close();
      throw error;
    }
    return close;
  }

  #subscribe(): Promise<Array<() => void>> {
    if (!this.#subscription) {
      const subscription = this.#listen();
      // failed: the next stream tries again
      subscription.catch(() => {
        if (this.#subscription === subscription) this.#subscription = null;
      });
      this.#subscription = subscription;
    }
    return this.#subscription;
  }

  /** Both subscriptions, or none: the first is stopped if the second fails. */
  async #listen(): Promise<Array<() => void>> {
    const { tusk } = this.#api;
    const finished = await tusk.onFinished(this.#on('finished'));
    try {
      return [finished, await tusk.onProgress(this.#on('progress'))];
    } catch (error) {
      finished();
      throw error;
    }
  }

  #unsubscribe(): void {
    const subscription = this.#subscription;
    this.#subscription = null;
    subscription?.then(
      (stops) => {
        for (const stop of stops) stop();
      },
      () => {},
    );
  }

  #on(event: JobEvent) {
    return (ids: string[]) => {
      // caught: a batch whose handling throws must not end the chain, and every later batch, for every stream
      this.#reading = this.#reading.then(() => this.#read(event, ids)).catch(() => {});
    };
  }

  async #read(event: JobEvent, ids: string[]): Promise<void> {
    if (this.#streams.size === 0) return;
    let rows: EventRows;
    try {
      const pool = await this.#api.pools.reads();
      rows =
        event === 'finished'
          ? await selectFinished(pool, this.#api.schema, ids)
          : await selectProgress(pool, this.#api.schema, ids);
    } catch {
      // a batch that cannot be read (the statement timeout, a lost connection): its events
      // are lost to every stream, so every stream ends, and its client knows to look again
      for (const stream of [...this.#streams]) stream.end();
      return;
    }
    if (rows.length === 0) return;
    for (const stream of this.#streams) {
      const mine = stream.tenant === null ? rows : rows.filter((r) => r.tenant === stream.tenant);
      if (mine.length > 0) stream.push(event, mine);
    }
  }
}
