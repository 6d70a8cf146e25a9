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
  #announcements = 0;

  constructor(running: () => boolean) {
    this.#running = running;
  }

  /**
   * Jobs announced so far (notifications, and slots freed by outcomes written): a claim
   * that overlapped an announcement may have missed its jobs (its snapshot came first).
   */
  get announcements(): number {
    return this.#announcements;
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
    this.#announcements++;
    const [first] = this.#sleepers;
    if (first) first();
    else this.#woken = true;
  }

  /**
   * Outcomes were written: the slots they freed may let a limited tenant's next job be
   * claimed, and nothing else announces it. Every loop wakes; a claim already under way
   * (its snapshot taken before the write) counts it as overlapped, and looks again.
   */
  slotsFreed(): void {
    this.#announcements++;
    this.wakeAll();
  }

  /** Wakes every loop (or the next to sleep). */
  wakeAll(): void {
    if (this.#sleepers.size === 0) this.#woken = true;
    for (const wake of [...this.#sleepers]) wake();
  }
}
