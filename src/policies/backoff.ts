import { MAX_DELAY_MS } from '../validation/validate.js';

/**
 * How long to wait before retrying a failed attempt:
 * - `'exponential'` (default): (30 + n⁵) seconds for the n-th retry (n = 0, 1, 2, ...:
 *   30 s, 31 s, 62 s, 4.5 min, 17.6 min, 52.6 min, ...), plus up to 10 % random jitter
 *   so that jobs failing together do not retry together;
 * - a number: that many milliseconds every time;
 * - a function `(error, attempt) => ms | false`: your own; `false` stops retrying (the
 *   job is `dead`). A function that throws or returns something else than a
 *   non-negative number falls back to `'exponential'`.
 */
export type Backoff = 'exponential' | number | ((error: unknown, attempt: number) => number | false);

/** Retry settings of a task or of one job. */
export interface RetryPolicy {
  /** Attempts in all, including the first; default 5. */
  maxAttempts?: number;
  backoff?: Backoff;
  /** Queue the retries go to (e.g. a `retries` queue served by other workers). */
  queue?: string;
}

export type RetryDecision = { retry: false } | { retry: true; delayMs: number; queue?: string };

/**
 * The exponential backoff for attempt number `attempt` (1 = the first attempt
 * failed), with `jitter` in [0, 1) adding up to 10 %. For a fixed jitter it never
 * decreases as attempts grow, and it is capped at 100 years.
 */
export function exponentialBackoffMs(attempt: number, jitter: number): number {
  const n = Math.max(0, attempt - 1);
  const ms = (30 + n ** 5) * 1000 * (1 + 0.1 * jitter);
  return Math.min(MAX_DELAY_MS, Math.round(ms));
}

/**
 * Whether and when to retry after attempt `attempt` of `maxAttempts` failed with `error`.
 * Pure: `random` gives the jitter.
 */
export function decideRetry(
  policy: RetryPolicy | undefined,
  error: unknown,
  attempt: number,
  maxAttempts: number,
  random: () => number = Math.random,
): RetryDecision {
  if (attempt >= maxAttempts) return { retry: false };
  const backoff = policy?.backoff ?? 'exponential';
  let delayMs: number | false;
  if (typeof backoff === 'number') {
    delayMs = backoff;
  } else if (typeof backoff === 'function') {
    try {
      delayMs = backoff(error, attempt);
    } catch {
      delayMs = Number.NaN;
    }
    if (delayMs === false) return { retry: false };
  } else {
    delayMs = exponentialBackoffMs(attempt, random());
  }
  if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0) {
    delayMs = exponentialBackoffMs(attempt, random());
  }
  delayMs = Math.min(MAX_DELAY_MS, Math.round(delayMs));
  return policy?.queue ? { retry: true, delayMs, queue: policy.queue } : { retry: true, delayMs };
}
