import type pg from 'pg';
import type { Logger } from '../log.js';
import type { ClaimedRow } from '../queries/claimJobs.js';
import { nextDueInMs, promoteDueJobs } from '../queries/dueJobs.js';
import { ActiveJob } from './activeJob.js';
import { claimByWeight } from './claimByWeight.js';
import type { WorkerCounters } from './counters.js';
import type { HeldJobs } from './heldJobs.js';
import type { ResolvedWorkerOptions } from './options.js';
import type { Registration } from './registration.js';
import type { Wakeups } from './wakeups.js';

/** 'auto' prefetch buffers about this much work (ms of handler time per slot). */
const PREFETCH_WINDOW_MS = 25;
const MAX_AUTO_PREFETCH = 2000;
/**
 * Failed claims are retried at most this far apart, as often as an idle worker polls by
 * default: waiting longer spares the database nothing and left the worker idle for up to
 * 5 s after its claims worked again (claims can fail while the listening connection stays
 * up, so no reconnect wakes the loop).
 */
const CLAIM_RETRY_MAX_MS = 1000;

/** What the claim loops read and feed. */
export interface ClaimLoopParts {
  schema: string;
  log: Logger;
  options: ResolvedWorkerOptions;
  counters: WorkerCounters;
  held: HeldJobs;
  registration: Registration;
  /** The listening connection: no claim while it is down (the worker may look dead). */
  listener: { readonly connected: boolean };
  outcomes: { readonly unwritten: number };
  wakeups: Wakeups;
  running(): boolean;
  /** Jobs were added to those held ahead: start what there is room for. */
  claimed(): void;
}

/**
 * Claims jobs while the worker runs: as many as there is room for (the concurrency, plus
 * the prefetch), in batches, then sleeps until woken or a poll period has passed. An empty
 * claim right after a full one, or one a notification overlapped, looks again soon; a
 * failed one is retried with backoff. Jobs scheduled for later are promoted when due.
 */
export class ClaimLoop {
  readonly #pool: pg.Pool;
  readonly #p: ClaimLoopParts;
  readonly #o: ResolvedWorkerOptions;
  /** Jobs asked for by claims in flight. */
  #claiming = 0;
  /** performance.now() when something scheduled is due (by the database's clock). */
  #dueAt: number | null = null;
  #avgRunMs: number | null = null;

  constructor(pool: pg.Pool, parts: ClaimLoopParts) {
    this.#pool = pool;
    this.#p = parts;
    this.#o = parts.options;
  }

  /** A handler ran `runMs`: the 'auto' prefetch follows the average. */
  ran(runMs: number): void {
    this.#avgRunMs = this.#avgRunMs === null ? runMs : this.#avgRunMs * 0.9 + runMs * 0.1;
  }

  /** How many jobs to claim now (0: not worth a round trip yet). */
  want(): number {
    const { concurrency, batchSize } = this.#o;
    const ahead = this.#prefetchTarget();
    const held = this.#p.held.running + this.#p.held.ahead;
    const room = concurrency + ahead - held - this.#claiming;
    if (this.#p.outcomes.unwritten > 2 * batchSize) return 0;
    // with work in hand, wait until half the window is free: fewer, bigger claims (per-claim
    // overhead dominated at ~170 jobs a claim; ~500+ doubled the drain rate)
    const least = held > 0 ? Math.max(1, Math.floor((concurrency + ahead) / 2)) : 1;
    return room >= least ? Math.min(room, batchSize) : 0;
  }

  #prefetchTarget(): number {
    const { prefetch, concurrency } = this.#o;
    if (prefetch !== 'auto') return prefetch;
    if (this.#avgRunMs === null) return 0;
    const target = Math.round((concurrency * PREFETCH_WINDOW_MS) / Math.max(this.#avgRunMs, 0.01));
    return Math.min(MAX_AUTO_PREFETCH, target);
  }

  /** One claim loop; a worker runs two (see Worker.start). Ends when the worker stops running. */
  async run(): Promise<void> {
    const { schema, log, counters, held, registration, listener, wakeups } = this.#p;
    let failures = 0;
    let announcedBefore = 0;
    // this claim is the look at once after an empty claim that a notification overlapped
    let overlapRetry = false;
    // the next look-again's wait (0: none, wait for a notification or the poll)
    let lookAgainMs = 0;
    // the wait while look-agains are due but the other loop's claim holds the room (0: none)
    let noRoomMs = 0;
    let claimSentAt = 0;
    let failedAt = 0;
    while (this.#p.running()) {
      const retrying = overlapRetry;
      overlapRetry = false;
      const want = this.want();
      const registered = registration.id;
      if (want === 0 || registered === null || !listener.connected) {
        // while look-agains are due and the other loop's claim holds the room, the room is
        // checked again 2, 4 … 256 ms apart, over again while that lasts (no query): that
        // claim may come back empty, and then nothing would wake this loop before the poll.
        // The look-agains wait for the room. A worker full of running jobs waits for one to end.
        const claimHolds = lookAgainMs > 0 && this.#claiming > 0;
        noRoomMs = !claimHolds ? 0 : noRoomMs === 0 || noRoomMs >= 256 ? 2 : noRoomMs * 2;
        await wakeups.sleep(noRoomMs > 0 ? noRoomMs : this.#o.pollMs);
        continue;
      }
      noRoomMs = 0;
      let rows: ClaimedRow[];
      try {
        if (this.#dueAt !== null && performance.now() >= this.#dueAt) {
          this.#dueAt = null;
          await promoteDueJobs(this.#pool, schema);
        }
        announcedBefore = wakeups.announcements;
        this.#claiming += want;
        try {
          claimSentAt = performance.now();
          // the id now: a re-registration during the promotion may have changed it
          const worker = registration.id ?? registered;
          rows = await claimByWeight(this.#pool, schema, {
            worker,
            want,
            leaseMs: this.#o.leaseMs,
            queues: this.#o.queues,
          });
        } finally {
          this.#claiming -= want;
        }
        failures = 0;
      } catch (error) {
        // the failures before a reconnect say nothing of the new connection
        if (failedAt !== registration.reconnects) failures = 0;
        failedAt = registration.reconnects;
        failures++;
        if (failures === 1 || failures % 20 === 0) {
          log.warn({ err: error, failures }, 'claiming jobs failed; retrying');
        }
        await wakeups.sleep(Math.min(CLAIM_RETRY_MAX_MS, 50 * 2 ** failures));
        continue;
      }
      counters.claimed += rows.length;
      const claimedAt = performance.now();
      // the lease runs from the claim's start on the server, so after claimSentAt here
      const leaseUntil = claimSentAt + this.#o.leaseMs - this.#o.leaseMarginMs;
      held.supersede(rows);
      for (const row of rows) held.add(new ActiveJob(row, claimSentAt, claimedAt, leaseUntil));
      this.#p.claimed();
      if (rows.length > 0) {
        // jobs were there: an empty claim next is probably a tenant row locked by another
        // claim for a moment, so look again soon before falling back to notifications
        lookAgainMs = 2;
        continue;
      }
      // jobs were announced while this claim ran (a notification, or slots an outcome
      // freed): its snapshot, or a tenant row another claim held for a moment, may have
      // hidden them. Look again at once (the other loop, woken by it, found no room while
      // this claim held it), then on with the look-agains, from their start if they had run
      // out (a locked tenant row may hide the jobs a little longer). An overlapped look at
      // once is followed by the look-agains.
      const overlapped = wakeups.announcements !== announcedBefore;
      if (overlapped && (lookAgainMs === 0 || lookAgainMs > 256)) lookAgainMs = 2;
      if (overlapped && !retrying) {
        overlapRetry = true;
        continue;
      }
      let waitMs = this.#o.pollMs;
      if (lookAgainMs > 0 && lookAgainMs <= 256) {
        waitMs = lookAgainMs;
        lookAgainMs *= 2;
      } else {
        lookAgainMs = 0;
      }
      await this.#refreshDue();
      if (this.#dueAt !== null) waitMs = Math.min(waitMs, this.#dueAt - performance.now());
      await wakeups.sleep(Math.max(0, waitMs));
    }
  }

  /** When the next scheduled or retried job is due (unknown after a failure: none). */
  async #refreshDue(): Promise<void> {
    try {
      const asked = performance.now();
      const ms = await nextDueInMs(this.#pool, this.#p.schema);
      this.#dueAt = ms === null ? null : asked + ms;
    } catch {
      this.#dueAt = null;
    }
  }
}
