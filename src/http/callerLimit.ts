import { HttpError } from './errors.js';
import type { Principal } from './tokens.js';

/**
 * Retry-After of a refusal, in seconds. A held request frees its slot when its wait ends —
 * a long poll when its job finishes or its waitMs runs out, a stream when its client
 * leaves — which the server cannot foresee and may be any moment: a short wait, and each
 * early retry is a cheap refusal (counted by the rate limit too).
 */
const RETRY_AFTER_SECONDS = '1';

/** The key a caller's held requests count under: null for the admin, which is not counted. */
export const heldKey = (principal: Principal): string | null => (principal.scopes.has('admin') ? null : principal.key);

/**
 * How many of one kind of long-held request (event streams, long polls) each caller — one
 * API token — may hold at once: past it, a 429 naming the limit, with Retry-After. Held
 * requests are few per honest client; without a bound, one token could hold the server's
 * sockets and timers, and the reads each of them ends with, for every other tenant. The
 * admin (and the local caller of a server without auth) is not counted: it may do anything
 * already, and an app that mounts the API behind its own auth serves all its users with it.
 */
export class CallerLimit {
  readonly #held = new Map<string, number>();
  readonly #max: number;
  readonly #code: string;
  readonly #what: string;

  /** E.g. `new CallerLimit(16, 'too_many_streams', 'event streams')`. */
  constructor(max: number, code: string, what: string) {
    this.#max = max;
    this.#code = code;
    this.#what = what;
  }

  /**
   * Counts one more for `key`, or throws the 429; returns the function that lets it go
   * (once). A null key (the admin) is not counted.
   */
  take(key: string | null): () => void {
    if (key === null) return () => {};
    const held = this.#held.get(key) ?? 0;
    if (held >= this.#max) {
      throw new HttpError(
        429,
        this.#code,
        `this token holds ${held} ${this.#what}, the most it may hold at once: end one first`,
        undefined,
        { 'Retry-After': RETRY_AFTER_SECONDS },
      );
    }
    this.#held.set(key, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.#held.get(key) ?? 1) - 1;
      if (left > 0) this.#held.set(key, left);
      else this.#held.delete(key);
    };
  }
}
