import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from './env.js';
import { HttpError } from './errors.js';

/** Requests per token: `perSecond` on average, up to `burst` at once. */
export interface RateLimit {
  perSecond: number;
  burst: number;
}

export const DEFAULT_RATE_LIMIT: RateLimit = { perSecond: 200, burst: 1000 };
/** Buckets kept at most; full ones are forgotten first (a full bucket is a new one). */
const MAX_BUCKETS = 10_000;

interface Bucket {
  tokens: number;
  at: number;
}

/**
 * A token bucket per caller (per API token): one tenant's flood of requests is refused
 * (429, with `Retry-After`) before it reaches the database, and other tokens are not
 * slowed by it. Callers are counted by `principal.key`, so this runs after auth.
 */
export function rateLimit(limit: RateLimit, now: () => number = Date.now): MiddlewareHandler<AppEnv> {
  const buckets = new Map<string, Bucket>();
  const refill = (b: Bucket, t: number) => {
    b.tokens = Math.min(limit.burst, b.tokens + ((t - b.at) / 1000) * limit.perSecond);
    b.at = t;
  };
  return async (c, next) => {
    const principal = c.get('principal');
    if (principal) {
      const t = now();
      let bucket = buckets.get(principal.key);
      if (!bucket) {
        if (buckets.size >= MAX_BUCKETS) {
          for (const [key, b] of buckets) {
            refill(b, t);
            if (b.tokens >= limit.burst) buckets.delete(key);
          }
        }
        bucket = { tokens: limit.burst, at: t };
        buckets.set(principal.key, bucket);
      }
      refill(bucket, t);
      if (bucket.tokens < 1) {
        const seconds = Math.max(1, Math.ceil((1 - bucket.tokens) / limit.perSecond));
        c.header('Retry-After', String(seconds));
        throw new HttpError(
          429,
          'rate_limited',
          `over this token's limit of ${limit.perSecond} requests a second (${limit.burst} at once): retry in ${seconds} s`,
        );
      }
      bucket.tokens -= 1;
    }
    await next();
  };
}
