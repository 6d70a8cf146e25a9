import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decideRetry, exponentialBackoffMs } from '../../src/policies/backoff.js';
import { sampleOrder, splitByWeight } from '../../src/policies/weights.js';

const MAX = 100 * 365.25 * 24 * 3600 * 1000;

describe('retry policies (pure, no database)', () => {
  it('exponential backoff: 30 + n⁵ seconds plus < 10 % jitter', () => {
    expect(exponentialBackoffMs(1, 0)).toBe(30_000);
    expect(exponentialBackoffMs(2, 0)).toBe(31_000);
    expect(exponentialBackoffMs(4, 0)).toBe((30 + 243) * 1000);
    expect(exponentialBackoffMs(4, 0.99)).toBeLessThan((30 + 243) * 1100);
  });

  it('property: backoff is never negative and never decreases as attempts grow (same jitter draw)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 999 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (n, jitter) => {
          const a = exponentialBackoffMs(n, jitter);
          const b = exponentialBackoffMs(n + 1, jitter);
          return a >= 0 && b >= a && b <= MAX;
        },
      ),
    );
  });

  it('property: never retries at or past maxAttempts; otherwise a delay in range', () => {
    const backoffArb = fc.oneof(
      fc.constant<'exponential'>('exponential'),
      fc.integer({ min: 0, max: 1e9 }),
      fc.func(fc.oneof(fc.integer({ min: -1e6, max: 1e9 }), fc.constant<false>(false), fc.double())),
    );
    fc.assert(
      fc.property(
        backoffArb,
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 50 }),
        (backoff, attempt, max) => {
          const d = decideRetry({ backoff }, new Error('x'), attempt, max, () => 0.5);
          if (attempt >= max) return d.retry === false;
          if (!d.retry) return typeof backoff === 'function';
          return Number.isInteger(d.delayMs) && d.delayMs >= 0 && d.delayMs <= MAX;
        },
      ),
    );
  });

  it('a function returning false stops retrying; one that throws or returns junk falls back to exponential', () => {
    expect(decideRetry({ backoff: () => false }, new Error('x'), 1, 5)).toEqual({ retry: false });
    expect(decideRetry({ backoff: (_e, n) => n * 100 }, new Error('x'), 3, 5)).toEqual({ retry: true, delayMs: 300 });
    const thrown = decideRetry(
      {
        backoff: () => {
          throw new Error('bug');
        },
      },
      new Error('x'),
      1,
      5,
      () => 0,
    );
    expect(thrown).toEqual({ retry: true, delayMs: 30_000 });
    expect(decideRetry({ backoff: () => -5 }, new Error('x'), 1, 5, () => 0)).toEqual({ retry: true, delayMs: 30_000 });
    expect(decideRetry({ backoff: 250, queue: 'retries' }, new Error('x'), 1, 5)).toEqual({
      retry: true,
      delayMs: 250,
      queue: 'retries',
    });
  });
});

describe('queue weights (pure, no database)', () => {
  it('Efraimidis–Spirakis: 8:1 weights give ~8/9 first picks', () => {
    let critical = 0;
    const n = 20_000;
    for (let i = 0; i < n; i++)
      if (
        sampleOrder([
          ['critical', 8],
          ['default', 1],
        ])[0] === 'critical'
      )
        critical++;
    expect(critical / n).toBeGreaterThan(0.87);
    expect(critical / n).toBeLessThan(0.91);
  });

  it('a one-slot fetch is a weighted pick; a big one splits by weight', () => {
    let critical = 0;
    for (let i = 0; i < 9000; i++)
      if (
        splitByWeight(
          [
            ['critical', 8],
            ['default', 1],
          ],
          1,
        )[0]?.[0] === 'critical'
      )
        critical++;
    expect(critical / 9000).toBeGreaterThan(0.86);
    expect(critical / 9000).toBeLessThan(0.92);
    expect(
      splitByWeight(
        [
          ['critical', 8],
          ['default', 1],
        ],
        900,
      ),
    ).toEqual([
      ['critical', 800],
      ['default', 100],
    ]);
  });

  it('property: a split hands out exactly n slots, to the given queues only', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(
          fc.tuple(fc.string({ minLength: 1, maxLength: 5 }), fc.double({ min: 0.01, max: 100, noNaN: true })),
          {
            minLength: 1,
            maxLength: 5,
            selector: ([name]) => name,
          },
        ),
        fc.integer({ min: 0, max: 300 }),
        (queues, n) => {
          const split = splitByWeight(queues, n);
          const names = new Set(queues.map(([q]) => q));
          return split.reduce((s, [, c]) => s + c, 0) === n && split.every(([q, c]) => names.has(q) && c > 0);
        },
      ),
    );
  });
});
