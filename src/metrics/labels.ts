/** The label value of the series that holds what went over the cap. */
export const OTHER = '_other';

/**
 * The label sets a metric family keeps, so that tenants, who choose queue names, cannot
 * choose how large `/metrics` grows: at most `max` sets are kept, any further one is
 * recorded under the set whose every value is `_other`, and a set not seen for
 * `staleAfterMs` is dropped (with its series), which makes room again.
 */
export class LabelSets<L extends Record<string, string>> {
  /** key → labels and when they were last seen. */
  readonly #kept = new Map<string, { labels: L; seen: number }>();

  constructor(
    readonly names: readonly (keyof L & string)[],
    readonly max: number,
    readonly staleAfterMs: number,
  ) {}

  /** The labels to record `labels` under at time `now`: their own if kept, else `_other`. */
  admit(labels: L, now: number): L {
    const key = JSON.stringify(this.names.map((n) => labels[n]));
    let kept = this.#kept.get(key);
    if (!kept) {
      const isOther = this.names.every((n) => labels[n] === OTHER);
      if (!isOther && this.size >= this.max) return this.admit(this.other(), now);
      kept = { labels, seen: now };
      this.#kept.set(key, kept);
    }
    kept.seen = now;
    return kept.labels;
  }

  /** Every kept set, `_other` included. */
  all(): L[] {
    return [...this.#kept.values()].map((k) => k.labels);
  }

  /** Drops the sets not seen since `now - staleAfterMs`; returns them. */
  sweep(now: number): L[] {
    const dropped: L[] = [];
    for (const [key, kept] of this.#kept) {
      if (now - kept.seen > this.staleAfterMs) {
        this.#kept.delete(key);
        dropped.push(kept.labels);
      }
    }
    return dropped;
  }

  /** Kept sets, `_other` not counted. */
  get size(): number {
    return this.#kept.size - (this.#kept.has(this.#otherKey()) ? 1 : 0);
  }

  other(): L {
    return Object.fromEntries(this.names.map((n) => [n, OTHER])) as L;
  }

  #otherKey(): string {
    return JSON.stringify(this.names.map(() => OTHER));
  }
}
