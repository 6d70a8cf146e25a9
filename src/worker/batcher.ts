/**
 * Collects items and writes them in batches, one write in flight at a time: under load,
 * everything that arrives while a write is in flight goes into the next one, so the batch
 * size follows the load without adding a timer's delay when idle.
 */
export class Batcher<T> {
  readonly #write: (items: T[]) => Promise<void>;
  readonly #maxBatch: number;
  readonly #written: () => void;
  #pending: T[] = [];
  #writing = 0;
  #scheduled = false;
  #idle: Array<() => void> = [];

  /** `written` runs after each write, once its items no longer count in `size`. */
  constructor(write: (items: T[]) => Promise<void>, maxBatch: number, written: () => void = () => {}) {
    this.#write = write;
    this.#maxBatch = maxBatch;
    this.#written = written;
  }

  /** Items not yet written (waiting or in flight). */
  get size(): number {
    return this.#pending.length + this.#writing;
  }

  add(item: T): void {
    this.#pending.push(item);
    if (!this.#scheduled && this.#writing === 0) {
      // let what finishes in the same turn of the event loop join this batch
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        this.#next();
      });
    }
  }

  /** Resolves once everything added so far is written. */
  drain(): Promise<void> {
    if (this.size === 0 && !this.#scheduled) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #next(): void {
    if (this.#writing > 0) return;
    if (this.#pending.length === 0) {
      for (const resolve of this.#idle.splice(0)) resolve();
      return;
    }
    const items = this.#pending.splice(0, this.#maxBatch);
    this.#writing = items.length;
    // #write reports its own errors; a rejection must not stop the batcher
    this.#write(items)
      .catch(() => {})
      .then(() => {
        this.#writing = 0;
        try {
          this.#written();
        } catch {
          // a wake-up is all it is: neither it nor the write may stop the batcher
        }
        this.#next();
      });
  }
}
