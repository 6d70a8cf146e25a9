import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { z } from 'zod';
import type { Database } from '../db/connection.js';
import { Listener } from '../db/listener.js';
import { TuskError } from '../errors.js';
import type { Logger } from '../log.js';
import { checkSchema } from '../migrate/migrate.js';
import {
  deleteStaged,
  releaseDrainLock,
  selectStaged,
  sendOver,
  takeoverWaitMs,
  tryDrainLock,
} from '../queries/staged.js';
import { parse } from '../validation/validate.js';
import { type Sink, StagedJob } from './sink.js';
import { tuskSink } from './tuskSink.js';

/** Options of `tusk.drainer()`. */
export interface DrainerOptions {
  /** Where staged jobs go: `'tusk'` (this queue, exactly once) or a Sink (e.g. `bullmqSink()`). */
  sink: Sink | 'tusk';
  /** Most jobs forwarded per batch; default 1 000. */
  batchSize?: number;
  /** Poll period when no staging notification arrives; default 1 s. */
  pollMs?: number;
  /** How often a waiting drainer tries to become the active one; default 1 s. */
  standbyPollMs?: number;
  /** Longest wait between retries of a failing sink (the first is 250 ms, then doubling); default 30 s. */
  maxBackoffMs?: number;
  /**
   * How long a send may take: then its `context.signal` aborts and the batch stays staged
   * (sent again after a backoff). A drainer taking over from one that lost its connection
   * mid-send waits that long before it sends; default 10 s.
   */
  sendTimeoutMs?: number;
  /** Called after each forwarded batch. */
  onBatch?: (batch: DrainedBatch) => void;
}

/** A batch the drainer forwarded and deleted. */
export interface DrainedBatch {
  count: number;
  firstId: string;
  lastId: string;
  /** Time from reading the batch to its deletion. */
  ms: number;
}

/** What a drainer needs of its Tusk instance. */
export interface DrainerHost {
  schema: string;
  log: Logger;
  database(): Promise<Database>;
  forget(drainer: Drainer): void;
}

const optionsSchema = z.strictObject({
  sink: z.custom<Sink | 'tusk'>(
    (s) =>
      s === 'tusk' ||
      (typeof s === 'object' &&
        s !== null &&
        typeof (s as Sink).send === 'function' &&
        typeof (s as Sink).name === 'string'),
    { error: "must be 'tusk' or a Sink: an object with a name and send(jobs, context)" },
  ),
  batchSize: z.number().int().min(1).max(10_000).optional(),
  pollMs: z.number().int().min(10).max(3_600_000).optional(),
  standbyPollMs: z.number().int().min(10).max(3_600_000).optional(),
  maxBackoffMs: z.number().int().min(250).max(3_600_000).optional(),
  sendTimeoutMs: z.number().int().min(100).max(3_600_000).optional(),
  onBatch: z.function().optional(),
});

/**
 * A failure of the sink (as opposed to the database), retried with backoff. `over`: the
 * sink's send ended (it failed), rather than being given up while it may still run.
 */
class SinkError extends Error {
  readonly over: boolean;
  constructor(message: string, options: { cause: unknown; over: boolean }) {
    super(message, { cause: options.cause });
    this.over = options.over;
  }
}

const FIRST_BACKOFF_MS = 250;
/**
 * Waited past the end of a lost drainer's send, by the database's clock: covers a late
 * timer in that drainer's process and a sink slow to stop on its signal.
 */
const TAKEOVER_MARGIN_MS = 1000;

/**
 * Forwards staged jobs (see `tusk.stage`) to a sink, in batches: reads the oldest
 * committed rows, hands them to the sink, deletes them once the sink resolved. A drainer
 * killed mid-batch leaves the batch staged: the next one sends it again (at least once).
 *
 * One drainer per schema is active (a session advisory lock on its own connection);
 * others stand by and take the lock within `standbyPollMs` when it stops or dies. Only
 * one sends at a time: a send ends (or is given up, its signal aborted) within
 * `sendTimeoutMs`, and at once when the drainer loses its connection; one that takes the
 * lock from a drainer that lost it mid-send first waits, by the database's clock, until
 * that send's time and a margin are over (see drainer_lease in sql/000030_baseline.sql).
 *
 * Order: each batch is the oldest rows, in staging (id) order, of those committed when it
 * is read. So a job whose transaction committed before another job was staged is
 * forwarded first: the jobs of one transaction, and those staged one transaction after
 * another, keep their order. Transactions that overlap go roughly in commit order: a row
 * is not held back for an earlier-staged row whose transaction is still open.
 */
export class Drainer {
  readonly #host: DrainerHost;
  readonly #sink: Sink;
  readonly #opts: Required<Omit<DrainerOptions, 'sink' | 'onBatch'>> & Pick<DrainerOptions, 'onBatch'>;
  #state: 'new' | 'standby' | 'active' | 'stopping' | 'stopped' = 'new';
  #listener: Listener | null = null;
  /** The connection holding the lock (a reconnect is a new session, without it). */
  #lockedOn: pg.Client | null = null;
  #loop: Promise<void> | null = null;
  #wake: (() => void) | null = null;
  /** Whether the current sleep is the idle wait, which a staging notification ends. */
  #idle = false;
  #notified = false;
  #backoffMs = 0;
  #forwarded = 0;
  /**
   * Whether, holding the lock, it has seen that no send of the drainer before can still be
   * running: then it forwards.
   */
  #clear = false;
  /** The send in flight, aborted if the lock connection is lost. */
  #sending: AbortController | null = null;

  constructor(host: DrainerHost, options: DrainerOptions) {
    const o = parse(optionsSchema, options, 'options') as DrainerOptions;
    this.#host = host;
    this.#sink = o.sink === 'tusk' ? tuskSink : o.sink;
    this.#opts = {
      batchSize: o.batchSize ?? 1000,
      pollMs: o.pollMs ?? 1000,
      standbyPollMs: o.standbyPollMs ?? 1000,
      maxBackoffMs: o.maxBackoffMs ?? 30_000,
      sendTimeoutMs: o.sendTimeoutMs ?? 10_000,
      onBatch: o.onBatch,
    };
  }

  /** `standby` while another drainer is active, `active` while this one forwards. */
  get state(): 'new' | 'standby' | 'active' | 'stopping' | 'stopped' {
    return this.#state;
  }

  /** Jobs this drainer forwarded (and deleted from the staging table). */
  get forwarded(): number {
    return this.#forwarded;
  }

  /**
   * Connects (the first failure is thrown, as is a schema that is not migrated) and
   * starts draining or standing by.
   */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new TuskError(`drainer cannot start: it is ${this.#state}`);
    this.#state = 'standby';
    let db: Database;
    try {
      db = await this.#host.database();
      await checkSchema(db.pool, this.#host.schema);
    } catch (error) {
      this.#state = 'stopped';
      this.#host.forget(this);
      throw error;
    }
    // (a sink written in plain JavaScript may open synchronously, or throw)
    await Promise.resolve()
      .then(() => this.#sink.open?.())
      .catch((error: unknown) =>
        this.#host.log.warn(
          { err: error },
          `drainer: opening ${this.#sink.name} failed (${(error as Error)?.message}); its sends connect again`,
        ),
      );
    // stopped while it connected or opened its sink: nothing to start (stop() did the rest)
    if (this.#state !== 'standby') return;
    const channel = `${this.#host.schema}:staged`;
    this.#listener = new Listener({
      label: 'drainer',
      // named so that operators (and pg_stat_activity) can tell which process drains
      clientConfig: { ...db.clientConfig, application_name: `tusk drainer pid=${process.pid}` },
      channels: [channel],
      log: this.#host.log,
      onNotification: () => {
        this.#notified = true;
        if (this.#idle) this.#wake?.();
      },
      onDisconnect: () => {
        // the lock went with the session: stop sending, stand by until the new one takes it again
        this.#lockedOn = null;
        this.#sending?.abort(new TuskError('the drainer lost its database connection, and with it the drain lock'));
        this.#setState('standby');
      },
    });
    try {
      await this.#listener.start();
    } catch (error) {
      this.#state = 'stopped';
      this.#host.forget(this);
      throw error;
    }
    this.#loop = this.#run();
  }

  /** Finishes the batch in hand, gives up the lock (a standby takes over) and disconnects. */
  async stop(): Promise<void> {
    if (this.#state === 'new') this.#state = 'stopped';
    if (this.#state === 'stopped') return;
    if (this.#state !== 'stopping') {
      this.#state = 'stopping';
      this.#wake?.();
    }
    await this.#loop;
    const client = this.#lockedOn;
    this.#lockedOn = null;
    if (client) await releaseDrainLock(client, this.#host.schema).catch(() => {});
    await this.#listener?.stop();
    await this.#sink.close?.().catch((error: unknown) => this.#host.log.warn({ err: error }, 'sink close failed'));
    this.#state = 'stopped';
    this.#host.forget(this);
  }

  get #running(): boolean {
    return this.#state === 'standby' || this.#state === 'active';
  }

  async #run(): Promise<void> {
    const { log } = this.#host;
    while (this.#running) {
      const client = this.#listener?.client ?? null;
      try {
        if (!client) {
          await this.#sleep(100);
        } else if (this.#lockedOn !== client) {
          if (await tryDrainLock(client, this.#host.schema)) {
            this.#lockedOn = client;
            this.#clear = false;
          } else {
            if (this.#state !== 'standby') log.info({}, 'another drainer is active; standing by to take over');
            this.#setState('standby');
            await this.#sleep(this.#opts.standbyPollMs);
          }
        } else if (!this.#clear) {
          // the lock is ours; a send of the drainer that held it before may still be running
          const waitMs = await takeoverWaitMs(client, this.#host.schema, TAKEOVER_MARGIN_MS);
          if (waitMs > 0) {
            log.info(
              { waitMs },
              `drainer: the previous active drainer lost its lock mid-send; waiting ${waitMs} ms, until that send has timed out, before forwarding`,
            );
            await this.#sleep(waitMs);
          } else {
            this.#clear = true;
            this.#setState('active');
            log.info({ sink: this.#sink.name }, `drainer active: forwarding staged jobs to ${this.#sink.name}`);
          }
        } else {
          this.#notified = false;
          const count = await this.#batch(client);
          if (this.#backoffMs > 0)
            log.info({ sink: this.#sink.name }, `drainer: ${this.#sink.name} accepts jobs again`);
          this.#backoffMs = 0;
          if (count < this.#opts.batchSize && !this.#notified) await this.#sleep(this.#opts.pollMs, true);
        }
      } catch (error) {
        if (this.#listener?.client !== client) continue; // connection lost (and the lock): reconnecting
        this.#backoffMs = Math.min(Math.max(this.#backoffMs * 2, FIRST_BACKOFF_MS), this.#opts.maxBackoffMs);
        const cause = error instanceof SinkError ? error.cause : error;
        log.warn(
          { err: cause, retryInMs: this.#backoffMs },
          `drainer: ${error instanceof SinkError ? `sending to ${this.#sink.name}` : 'reading the staged jobs'} failed (${(cause as Error)?.message}); the batch stays staged, retrying in ${this.#backoffMs} ms`,
        );
        await this.#sleep(this.#backoffMs);
      }
    }
  }

  /** Forwards one batch; returns its size (0: nothing staged). */
  async #batch(client: pg.Client): Promise<number> {
    const { schema } = this.#host;
    const transactional = this.#sink.transactional === true;
    if (transactional) await client.query('BEGIN');
    try {
      const t0 = performance.now();
      // a send to an outside sink outlives a lost connection: record until when it may run
      const rows = await selectStaged(
        client,
        schema,
        this.#opts.batchSize,
        transactional ? null : this.#opts.sendTimeoutMs,
      );
      if (rows.length > 0) {
        await this.#send(
          rows.map((row) => new StagedJob(row)),
          client,
          t0 + this.#opts.sendTimeoutMs,
        );
        await deleteStaged(
          client,
          schema,
          rows.map((r) => r.id),
          !transactional,
        );
      }
      if (transactional) await client.query('COMMIT');
      if (rows.length > 0) {
        this.#forwarded += rows.length;
        const batch = {
          count: rows.length,
          firstId: rows[0]?.id as string,
          lastId: rows.at(-1)?.id as string,
          ms: performance.now() - t0,
        };
        this.#host.log.debug(batch, 'drainer forwarded a batch');
        this.#opts.onBatch?.(batch);
      }
      return rows.length;
    } catch (error) {
      if (transactional) await client.query('ROLLBACK').catch(() => {});
      // the send failed by itself: a drainer taking over has nothing to wait for
      else if (error instanceof SinkError && error.over) await sendOver(client, schema).catch(() => {});
      throw error;
    }
  }

  /**
   * Hands a batch to the sink and waits for it until `deadline` (performance.now()), or
   * until the lock connection is lost; then aborts the send's signal and gives it up.
   */
  async #send(jobs: StagedJob[], client: pg.Client, deadline: number): Promise<void> {
    const controller = new AbortController();
    const { signal } = controller;
    this.#sending = controller;
    const timer = setTimeout(
      () => controller.abort(new TuskError(`the send took longer than sendTimeoutMs (${this.#opts.sendTimeoutMs} ms)`)),
      Math.max(0, deadline - performance.now()),
    );
    let over = false;
    try {
      if (this.#lockedOn !== client) {
        over = true;
        throw new TuskError('the drainer lost its database connection, and with it the drain lock');
      }
      await new Promise<void>((resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
        const ended = (error?: unknown) => {
          over = true;
          if (error === undefined) resolve();
          else reject(error);
        };
        try {
          this.#sink.send(jobs, { client, schema: this.#host.schema, signal }).then(() => ended(), ended);
        } catch (error) {
          ended(error);
        }
      });
    } catch (error) {
      throw new SinkError('sink failed', { cause: error, over });
    } finally {
      clearTimeout(timer);
      this.#sending = null;
    }
  }

  #setState(state: 'standby' | 'active'): void {
    if (this.#running) this.#state = state;
  }

  /** Waits `ms`, or less if stop() is called or, when `idle`, a job is staged. */
  #sleep(ms: number, idle = false): Promise<void> {
    if (!this.#running) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.#wake === done) {
          this.#wake = null;
          this.#idle = false;
        }
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wake = done;
      this.#idle = idle;
    });
  }
}
