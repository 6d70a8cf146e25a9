// Shared by the bad-input tests of the library, the CLI and the HTTP API: what the tables
// hold (to show a refusal wrote nothing), the rule for legal names, and arbitraries.
import fc from 'fast-check';
import { expect } from 'vitest';
import { TuskValidationError } from '../src/index.js';
import type { TestDb } from './helpers.js';

/** The tables a refused call must leave alone. */
export const TABLES = ['jobs', 'job_history', 'tenants', 'staged_jobs', 'schedules', 'config', 'api_tokens'] as const;

/** Row count and a hash of every row, per table: equal fingerprints, nothing written. */
export async function fingerprint(db: TestDb): Promise<Record<string, string>> {
  const parts = TABLES.map(
    (table) =>
      `SELECT '${table}' AS t, count(*)::int AS n, md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS h FROM $schema.${table} x`,
  );
  const rows = await db.rows<{ t: string; n: number; h: string }>(parts.join(' UNION ALL '));
  return Object.fromEntries(rows.map((r) => [r.t, `${r.n} rows ${r.h}`]));
}

/**
 * Runs `call` and expects a TuskValidationError for `field` (its message starting with
 * the field, matching `message` if given) and no change to any table.
 */
export async function expectRefused(
  db: TestDb,
  call: () => unknown,
  field: string,
  message?: RegExp,
): Promise<TuskValidationError> {
  const before = await fingerprint(db);
  let error: unknown;
  try {
    await call();
  } catch (e) {
    error = e;
  }
  expect(error, `expected ${field} to be refused`).toBeInstanceOf(TuskValidationError);
  const e = error as TuskValidationError;
  expect(e.field, e.message).toBe(field);
  expect(e.message.startsWith(`${field}: `), e.message).toBe(true);
  if (message) expect(e.message).toMatch(message);
  expect(await fingerprint(db)).toEqual(before);
  return e;
}

/**
 * The documented rule for names, written out independently of the code: 1 to `max`
 * code points, no control characters (Unicode Cc), no lone surrogates.
 */
export function isLegalName(s: string, max: number): boolean {
  if (!s.isWellFormed()) return false;
  const length = [...s].length;
  if (length < 1 || length > max) return false;
  for (const ch of s) {
    const c = ch.codePointAt(0) as number;
    if (c <= 0x1f || (c >= 0x7f && c <= 0x9f)) return false;
  }
  return true;
}

const surrogate = (c: number) => c >= 0xd800 && c <= 0xdfff;

/** One code point of any plane but NUL and the surrogates. */
export const storableChar = fc
  .integer({ min: 1, max: 0x10ffff })
  .filter((c) => !surrogate(c))
  .map((c) => String.fromCodePoint(c));

/**
 * Strings as names: mostly plausible ones, with unicode, control characters, lone
 * surrogates, NUL, SQL-looking text, the empty string and over-long ones.
 */
export const nameLike = (max: number): fc.Arbitrary<string> =>
  fc.oneof(
    fc.string({ unit: storableChar, minLength: 1, maxLength: 20 }),
    fc.string({ unit: 'binary-ascii', maxLength: 20 }),
    fc.string({
      unit: fc.oneof(
        storableChar,
        fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
      ),
      maxLength: 10,
    }),
    fc.constantFrom("x'; DROP TABLE jobs; --", '" OR 1=1 --', '$1', '\\', '%', '_', 'a\u0000b', ' ', '😀'),
    fc.integer({ min: max - 2, max: max + 2 }).map((n) => '😀'.repeat(n)),
    fc.constant(''),
  );

/** JSON data made of storable strings (no NUL, no lone surrogates): must round-trip exactly. */
export const jsonData = fc.jsonValue({ maxDepth: 4, stringUnit: storableChar });

/** A value of another type than `kind`, for "wrong type" option checks. */
export function wrongType(kind: 'string' | 'number' | 'boolean' | 'date' | 'object'): fc.Arbitrary<unknown> {
  const all: Record<string, fc.Arbitrary<unknown>> = {
    string: fc.string({ minLength: 1, maxLength: 5 }).filter((s) => isLegalName(s, 100)),
    number: fc.integer({ min: 1, max: 5 }),
    boolean: fc.boolean(),
    date: fc.constant(new Date('2030-01-01T00:00:00Z')),
    object: fc.constant({}),
    null: fc.constant(null),
    array: fc.constant([]),
    function: fc.constant(() => 1),
    bigint: fc.bigInt({ min: 1n, max: 5n }),
    symbol: fc.constant(Symbol('s')),
  };
  const others = Object.entries(all)
    .filter(([k]) => k !== kind)
    .map(([, a]) => a);
  return fc.oneof(...others);
}

type Kind = Parameters<typeof wrongType>[0];

/**
 * An option of `kinds` with a value of another kind: `[key, value]`. `legal` keeps out
 * values that key does take after all (null where null resets).
 */
export function wrongOption<K extends string>(
  kinds: Record<K, Kind>,
  legal: (key: K, value: unknown) => boolean = () => false,
): fc.Arbitrary<readonly [K, unknown]> {
  return fc.constantFrom(...(Object.keys(kinds) as K[])).chain((key) =>
    wrongType(kinds[key])
      .filter((value) => !legal(key, value))
      .map((value) => [key, value] as const),
  );
}

/** Enqueue options by the JSON kind each takes: a value of another kind must be refused. */
export const OPTION_KINDS = {
  tenant: 'string',
  queue: 'string',
  priority: 'number',
  runAt: 'date',
  delayMs: 'number',
  maxAttempts: 'number',
  expiresAt: 'date',
  concurrencyKey: 'string',
  dedupe: 'boolean',
  dedupKey: 'string',
  dedupWindowMs: 'number',
  retry: 'object',
  source: 'object',
} as const;
