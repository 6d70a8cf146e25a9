/** A FIFO queue with O(1) push and shift (Array#shift is O(n)). */
export class Fifo<T> {
  #items: (T | undefined)[] = [];
  #head = 0;

  get length(): number {
    return this.#items.length - this.#head;
  }

  push(item: T): void {
    this.#items.push(item);
  }

  /** The first item, left in place. */
  peek(): T | undefined {
    return this.#head < this.#items.length ? this.#items[this.#head] : undefined;
  }

  shift(): T | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head++] = undefined;
    // compact now and then so the array does not grow forever
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }

  /** Removes and returns every item. */
  drain(): T[] {
    const items = this.#items.slice(this.#head) as T[];
    this.#items = [];
    this.#head = 0;
    return items;
  }

  /** Removes the first item matching `match`; returns it. */
  remove(match: (item: T) => boolean): T | undefined {
    for (let i = this.#head; i < this.#items.length; i++) {
      const item = this.#items[i] as T;
      if (match(item)) {
        this.#items.splice(i, 1);
        return item;
      }
    }
    return undefined;
  }

  /** Removes every item matching `match`, in one pass; returns them. */
  removeAll(match: (item: T) => boolean): T[] {
    const removed: T[] = [];
    const kept: T[] = [];
    for (let i = this.#head; i < this.#items.length; i++) {
      const item = this.#items[i] as T;
      (match(item) ? removed : kept).push(item);
    }
    if (removed.length > 0) {
      this.#items = kept;
      this.#head = 0;
    }
    return removed;
  }

  *[Symbol.iterator](): Iterator<T> {
    for (let i = this.#head; i < this.#items.length; i++) yield this.#items[i] as T;
  }
}
