import { wakeableDelay } from './delay.js';

/**
 * How the claim loops wait: for a poll period, or until something makes a claim worth
 * its round trip (a job announced, room made, the connection back). A wake-up that comes
 * while no loop sleeps is kept for the next sleep, so none is lost between two claims.
 * Room made wakes only the loops that wait for room: a job's end or an outcome written
 * says nothing of jobs waiting, and a loop that found none has nothing to claim.
 */
export class Wakeups {
  readonly #running: () => boolean;
  readonly #sleepers = new Set<() => void>();
  /** The sleepers that wait for room (a subset of #sleepers). */
  readonly #roomSleepers = new Set<() => void>();
  #woken = false;
  #notifications = 0;

  constructor(running: () => boolean) {
    this.#running = running;
  }

  /** Notifications received so far: a claim that overlapped one may have missed its jobs. */
  get notifications(): number {
    return this.#notifications;
  }

  /**
   * Waits `ms`, or until woken; not at all if a wake-up is pending or the worker is not
   * running. `forRoom`: the loop has no room to claim into, and room made wakes it too.
   */
  sleep(ms: number, forRoom = false): Promise<void> {
    if (this.#woken || !this.#running()) {
      this.#woken = false;
      return Promise.resolve();
    }
    return forRoom ? wakeableDelay(ms, this.#sleepers, this.#roomSleepers) : wakeableDelay(ms, this.#sleepers);
  }

  /** Jobs were announced (NOTIFY). */
  notified(): void {
    // one claim loop is enough for what a notification announces; the other follows if
    // that claim comes back full
    if (!this.#running()) return;
    this.#notifications++;
    const [first] = this.#sleepers;
    if (first) first();
    else this.#woken = true;
  }

  /** Room was made (a job ended, an outcome was written, held jobs were dropped). */
  roomMade(): void {
    for (const wake of [...this.#roomSleepers]) wake();
  }

  /** Wakes every loop (or the next to sleep). */
  wakeAll(): void {
    if (this.#sleepers.size === 0) this.#woken = true;
    for (const wake of [...this.#sleepers]) wake();
  }
}
