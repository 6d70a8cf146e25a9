import { z } from 'zod';
import { clientKind, isTransactionLike, SUPPORTED_CLIENTS, type TransactionLike } from '../db/adapters.js';
import { TuskValidationError } from '../errors.js';

/** Longest delay accepted: 100 years. */
export const MAX_DELAY_MS = 100 * 365.25 * 24 * 3600 * 1000;

/** A name stored as text: non-empty, bounded, no NUL, well-formed Unicode. */
export const nameSchema = (max: number) =>
  z
    .string({ error: (issue) => `must be a string (got ${describe(issue.input)})` })
    .min(1, 'must not be empty')
    .max(max, `must be at most ${max} characters`)
    .refine((s) => !s.includes('\u0000'), 'must not contain NUL characters')
    .refine((s) => s.isWellFormed(), 'must be well-formed Unicode (no lone surrogates)');

const integer = (min: number, max: number) =>
  z
    .number({ error: (issue) => `must be a number (got ${describe(issue.input)})` })
    .refine((n) => Number.isInteger(n) && n >= min && n <= max, {
      error: (issue) => `must be an integer from ${min} to ${max} (got ${describe(issue.input)})`,
    });

/** A real Date inside PostgreSQL's comfortable range (years 1 to 9999). */
export const dateSchema = z.custom<Date>(
  (d) => d instanceof Date && !Number.isNaN(d.getTime()) && d.getUTCFullYear() >= 1 && d.getUTCFullYear() <= 9999,
  { error: (issue) => `must be a valid Date (got ${describe(issue.input)})` },
);

/** A source id (see EnqueueOptions.source): stored as text. */
export const isSourceId = (id: unknown): id is string | number =>
  Number.isSafeInteger(id) ||
  (typeof id === 'string' && id.length >= 1 && id.length <= 256 && !id.includes('\u0000') && id.isWellFormed());
export const SOURCE_ID_RULE = 'must be a string of 1 to 256 characters or an integer';

/** The per-job options of enqueue, field by field (the HTTP API reuses them). */
export const jobOptionShape = {
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
  priority: integer(-32768, 32767).optional(),
  runAt: dateSchema.optional(),
  delayMs: integer(0, MAX_DELAY_MS).optional(),
  maxAttempts: integer(1, 1000).optional(),
  expiresAt: dateSchema.optional(),
  concurrencyKey: nameSchema(256).optional(),
  dedupe: z.boolean({ error: 'must be true or false' }).optional(),
  dedupKey: nameSchema(512).optional(),
  dedupWindowMs: integer(0, MAX_DELAY_MS).optional(),
  source: z
    .strictObject({
      type: nameSchema(128),
      id: z.custom<string | number>(isSourceId, {
        error: (issue) => `${SOURCE_ID_RULE} (got ${describe(issue.input)})`,
      }),
      method: nameSchema(128).optional(),
    })
    .optional(),
  retry: z
    .strictObject({
      maxAttempts: integer(1, 1000).optional(),
      backoff: z
        .union([z.literal('exponential'), integer(0, MAX_DELAY_MS)], {
          error:
            "must be 'exponential' or a number of milliseconds (a backoff function belongs in the task definition)",
        })
        .optional(),
      queue: nameSchema(128).optional(),
    })
    .optional(),
};

const exclusiveTiming = (o: { runAt?: Date | undefined; delayMs?: number | undefined }) =>
  o.runAt === undefined || o.delayMs === undefined;
const timingMessage = { error: 'give runAt or delayMs, not both' };

/** A caller's connection, usually inside its transaction (see TransactionLike). */
export const clientSchema = z.custom<TransactionLike>((c) => isTransactionLike(c), {
  error: (issue) => `must be ${SUPPORTED_CLIENTS} (got ${clientKind(issue.input)})`,
});

export const enqueueOptionsSchema = z
  .strictObject({ ...jobOptionShape, client: clientSchema.optional() })
  .refine(exclusiveTiming, timingMessage);

export const stageOptionsSchema = z.strictObject(jobOptionShape).refine(exclusiveTiming, timingMessage);

export const jobSpecSchema = z
  .strictObject({
    ...jobOptionShape,
    task: nameSchema(200),
    payload: z.unknown().optional(),
  })
  .refine(exclusiveTiming, timingMessage);

/**
 * Parses `value` with `schema`, or throws a TuskValidationError naming the field, e.g.
 * `options.delayMs: must be an integer from 0 to ... (got -1)`.
 */
export function parse<T>(schema: z.ZodType<T>, value: unknown, field: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  if (!issue) throw new TuskValidationError(field, 'is invalid');
  const path = [field, ...issue.path.map(String)].join('.');
  if (issue.code === 'unrecognized_keys') {
    const keys = issue.keys.map((k) => JSON.stringify(k)).join(', ');
    throw new TuskValidationError(path, `unknown option${issue.keys.length > 1 ? 's' : ''} ${keys}`);
  }
  if (issue.code === 'invalid_type' && issue.expected === 'object' && issue.message.startsWith('Invalid input')) {
    throw new TuskValidationError(path, `must be an object (got ${describe(issue.input)})`);
  }
  throw new TuskValidationError(path, issue.message);
}

/** A short description of a bad value for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'bigint') return `${value}n (a BigInt)`;
  if (typeof value === 'string')
    return value.length > 40 ? `a string of ${value.length} characters` : JSON.stringify(value);
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? 'Invalid Date' : value.toISOString();
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
