import { z } from 'zod';
import { clientKind, isTransactionLike, SUPPORTED_CLIENTS, type TransactionLike } from '../db/adapters.js';
import { describe } from './describe.js';

export { describe } from './describe.js';
export { closest, furthest, keysAt, parse, unknownOptions } from './parse.js';

/** Longest delay accepted: 100 years. */
export const MAX_DELAY_MS = 100 * 365.25 * 24 * 3600 * 1000;
/** Longest delay of a nack: nack_job takes it as an integer (24.8 days). */
export const MAX_NACK_DELAY_MS = 2_147_483_647;

/** Decimal digits within a bigint's range (19 digits may pass it: PostgreSQL would refuse them). */
export const inBigintRange = (digits: string) => !/^\d+$/.test(digits) || BigInt(digits) <= 9223372036854775807n;

/** A positive bigint in decimal, as ids and lease tokens are written: up to 19 digits, no leading zero. */
export const ID_DIGITS = /^[1-9]\d{0,18}$/;

/**
 * An id given as a string, a number or a bigint, as the decimal digits the database wants;
 * null if it is not a positive integer in a bigint's range. A number must be a safe
 * integer: past 2^53 it is not the integer it was written as (2 ** 60 + 1 is 2 ** 60, and
 * String() of that reads 1152921504606847000, another id).
 */
export function idText(id: unknown): string | null {
  const text =
    typeof id === 'number' ? (Number.isSafeInteger(id) ? String(id) : null) : typeof id === 'bigint' ? String(id) : id;
  return typeof text === 'string' && ID_DIGITS.test(text) && inBigintRange(text) ? text : null;
}

// Messages are computed only on failure, and in as few checks as can be: each check and
// each error function costs (enqueueMany validates every entry of 10 000-job batches).

/** NUL and lone surrogates: neither text columns nor jsonb store them. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what it looks for
const UNSTORABLE = /[\u0000\p{Cs}]/u;
/** ...and control characters (Unicode Cc: newline, tab, escape, DEL, C1), not in names. */
const NOT_A_NAME = /[\p{Cc}\p{Cs}]/u;

/** What is wrong with text `UNSTORABLE` or `NOT_A_NAME` matched. */
function badText(s: unknown): string {
  const text = String(s);
  if (text.includes('\u0000')) return 'must not contain NUL characters';
  if (!text.isWellFormed()) return 'must be well-formed Unicode (no lone surrogates)';
  return `must not contain control characters (U+0000-U+001F, U+007F-U+009F; got ${describe(text)})`;
}

/** Text jsonb and text columns store exactly: no NUL, well-formed Unicode (no lone surrogates). */
export const storableText = <T extends z.ZodString>(schema: T) =>
  schema.refine((s) => !UNSTORABLE.test(s), { error: (issue) => badText(issue.input) });

const text = (max: number) => z.string().min(1, 'must not be empty').max(max, `must be at most ${max} characters`);

/**
 * A name (task, queue, tenant, schedule...): it is shown in logs, tables, metrics and the
 * dashboard, so besides being storable it has no control characters. 1 to `max`
 * characters, counted in code points as PostgreSQL counts them.
 */
export const nameSchema = (max: number) =>
  text(max).refine((s) => !NOT_A_NAME.test(s), { error: (issue) => badText(issue.input) });

/** A key (concurrency key, dedup key) compared, never shown: any storable text. */
export const keySchema = (max: number) => storableText(text(max));

/** An integer from `min` to `max`, with errors that say so and show the value. */
export const integer = (min: number, max: number) => {
  const rule = (issue: { input?: unknown }) =>
    `must be an integer from ${min} to ${max} (got ${describe(issue.input)})`;
  return z
    .number({ error: (issue) => (typeof issue.input === 'number' ? rule(issue) : undefined) })
    .refine((n) => Number.isInteger(n) && n >= min && n <= max, { error: rule })
    .meta({ type: 'integer', minimum: min, maximum: max }); // what the refinement checks, for the OpenAPI document
};

/** true or false, with an error that shows what was given. */
export const flagSchema = () => z.boolean({ error: (issue) => `must be true or false (got ${describe(issue.input)})` });

/** A string, with an error that shows what was given. */
export const stringSchema = () => z.string({ error: (issue) => `must be a string (got ${describe(issue.input)})` });

/** A failed attempt's message as its caller gives it (nack). */
export const errorMessageSchema = storableText(stringSchema().max(2000, 'must be at most 2000 characters'));

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
  concurrencyKey: keySchema(256).optional(),
  dedupe: flagSchema().optional(),
  dedupKey: keySchema(512).optional(),
  dedupWindowMs: integer(0, MAX_DELAY_MS).optional(),
  debounce: z
    .strictObject({
      key: keySchema(512),
      delayMs: integer(1, MAX_DELAY_MS),
      maxWaitMs: integer(1, MAX_DELAY_MS).optional(),
    })
    .optional(),
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

/** A job id as an argument: decimal digits, a safe integer or a bigint, positive, a bigint's range. */
export const jobIdArgSchema = z.custom<string | number | bigint>((id) => idText(id) !== null, {
  error: (issue) => `must be a job id: a positive integer (got ${describe(issue.input)})`,
});

/** At most this many dependencies a job (and jobs a flow). */
export const MAX_DEPENDENCIES = 10_000;

/** Deepest flow: its ids come back as a tree, which JSON.stringify overflows the stack on past ~1 200 levels. */
export const MAX_FLOW_DEPTH = 500;
export const TOO_DEEP_FLOW = `is nested too deep: a flow has at most ${MAX_FLOW_DEPTH} levels`;

/** The options of a job's dependencies (enqueue, enqueueMany, flow; not stage). */
export const dependencyShape = {
  dependsOn: z
    .array(jobIdArgSchema, { error: (issue) => `must be an array of job ids (got ${describe(issue.input)})` })
    .max(MAX_DEPENDENCIES, `must list at most ${MAX_DEPENDENCIES} jobs`)
    .optional(),
  onDependencyFailure: z
    .enum(['cancel', 'continue'], {
      error: (issue) => `must be 'cancel' or 'continue' (got ${describe(issue.input)})`,
    })
    .optional(),
};

type Timing = {
  runAt?: Date | undefined;
  delayMs?: number | undefined;
  debounce?: unknown;
  dedupe?: boolean | undefined;
  dedupKey?: string | undefined;
  dependsOn?: readonly unknown[] | undefined;
  onDependencyFailure?: string | undefined;
};

/** The checks across fields of a job's options, each with its own message. */
const timing = <T extends z.ZodType<Timing>>(schema: T) =>
  schema
    .refine((o) => o.runAt === undefined || o.delayMs === undefined, { error: 'give runAt or delayMs, not both' })
    .refine((o) => o.debounce === undefined || (o.runAt === undefined && o.delayMs === undefined), {
      error: 'debounce sets the start itself (its delayMs): give it without runAt or delayMs',
    })
    .refine((o) => o.debounce === undefined || (o.dedupKey === undefined && !o.dedupe), {
      error: 'give debounce or a dedup key (dedupe, dedupKey), not both',
    })
    .refine((o) => !o.dependsOn?.length || (o.debounce === undefined && o.dedupKey === undefined && !o.dedupe), {
      error: 'a job with dependencies (dependsOn) is not deduplicated nor debounced: give one or the other',
    });

/** onDependencyFailure only with dependsOn (a flow's jobs may have children instead: checked there). */
const dependencies = <T extends z.ZodType<Timing>>(schema: T) =>
  schema.refine((o) => o.onDependencyFailure === undefined || o.dependsOn !== undefined, {
    error: 'onDependencyFailure is for a job with dependencies: give dependsOn too',
  });

/** A caller's connection, usually inside its transaction (see TransactionLike). */
export const clientSchema = z.custom<TransactionLike>((c) => isTransactionLike(c), {
  error: (issue) => `must be ${SUPPORTED_CLIENTS} (got ${clientKind(issue.input)})`,
});

export const enqueueOptionsSchema = dependencies(
  timing(z.strictObject({ ...jobOptionShape, ...dependencyShape, client: clientSchema.optional() })),
);

export const stageOptionsSchema = timing(z.strictObject(jobOptionShape));

export const jobSpecSchema = dependencies(
  timing(
    z.strictObject({
      ...jobOptionShape,
      ...dependencyShape,
      task: nameSchema(200),
      payload: z.unknown().optional(),
    }),
  ),
);

export const stageSpecSchema = timing(
  z.strictObject({
    ...jobOptionShape,
    task: nameSchema(200),
    payload: z.unknown().optional(),
  }),
);

/**
 * A job of a flow, but its children (checked one by one, so that an error names the
 * child's path): enqueue's options but deduplication and debounce.
 */
export const flowNodeSchema = timing(
  z.strictObject({
    ...jobOptionShape,
    ...dependencyShape,
    dedupe: z.undefined({ error: 'does not apply to a job of a flow' }).optional(),
    dedupKey: z.undefined({ error: 'does not apply to a job of a flow' }).optional(),
    dedupWindowMs: z.undefined({ error: 'does not apply to a job of a flow' }).optional(),
    debounce: z.undefined({ error: 'does not apply to a job of a flow' }).optional(),
    task: nameSchema(200),
    payload: z.unknown().optional(),
    children: z
      .array(z.unknown(), { error: (issue) => `must be an array of jobs (got ${describe(issue.input)})` })
      .optional(),
  }),
);
