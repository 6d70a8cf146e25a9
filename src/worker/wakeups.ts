import { wakeableDelay } from './delay.js';

/**
 * How the claim loops wait: for a poll period, or until something makes a claim worth
 * its round trip (a job announced, room made, the connection back). A wake-up that comes
 * while no loop sleeps is kept for the next sleep, so none is lost between two claims.
 */
export class Wakeups {
  readonly #running: () => boolean;
  readonly #sleepers = new Set<() => void>();
  #woken = false;
  #notifications = 0;

  constructor(running: () => boolean) {
    this.#running = running;
  }

  /** Notifications received so far: a claim that overlapped one may have missed its jobs. */
  get notifications(): number {
    return this.#notifications;
  }

  /** Waits `ms`, or until woken; not at all if a wake-up is pending or the worker is not running. */
  sleep(ms: number): Promise<void> {
    if (this.#woken || !this.#running()) {
      this.#woken = false;
      return Promise.resolve();
    }
    return wakeableDelay(ms, this.#sleepers);
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

  /** Wakes every loop (or the next to sleep). */
  wakeAll(): void {
    if (this.#sleepers.size === 0) this.#woken = true;
    for (const wake of [...this.#sleepers]) wake();
  }
}
