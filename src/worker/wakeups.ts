import { wakeableDelay } from './delay.js';

/**
 * How the claim loops wait: for a poll period, or until something makes a claim worth
 * its round trip (a job announced, room made, slots freed, the connection back). A
 * wake-up that comes while no loop sleeps is kept for the next sleep, so none is lost
 * between two claims. A job's end wakes only the loops that wait for room: it says
 * nothing of jobs waiting, and a loop that found none has nothing to claim.
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
    if (!this.#running()) return;
    this.#notifications++;
    this.wakeOne();
  }

  /**
   * Wakes one loop (or the next to sleep): enough for what a notification announces, or
   * for the slots an outcome written freed in the database (a limited tenant's next job,
   * which nothing announces); the other loop follows if that claim comes back full.
   */
  wakeOne(): void {
    if (!this.#running()) return;
    const [first] = this.#sleepers;
    if (first) first();
    else this.#woken = true;
  }

  /** Room was made in the worker (a job ended). */
  roomMade(): void {
    for (const wake of [...this.#roomSleepers]) wake();
  }

  /** Wakes every loop (or the next to sleep). */
  wakeAll(): void {
    if (this.#sleepers.size === 0) this.#woken = true;
    for (const wake of [...this.#sleepers]) wake();
  }
}
