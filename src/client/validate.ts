import { z } from 'zod';
import { clientKind, isTransactionLike, SUPPORTED_CLIENTS, type TransactionLike } from '../db/adapters.js';
import { TuskValidationError } from '../errors.js';

/** Longest delay accepted: 100 years. */
export const MAX_DELAY_MS = 100 * 365.25 * 24 * 3600 * 1000;

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
  dedupe: z.boolean({ error: (issue) => `must be true or false (got ${describe(issue.input)})` }).optional(),
  dedupKey: keySchema(512).optional(),
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
 * `options.delayMs: must be an integer from 0 to ... (got -1)`; an unknown option says
 * which known one it may be a typo of.
 */
export function parse<T>(schema: z.ZodType<T>, value: unknown, field: string): T {
  const instance = nonPlainAt(schema, value, []);
  if (instance) {
    const path = [field, ...instance.path.map(String)].join('.');
    const got = instance.value instanceof Date ? 'a Date' : describe(instance.value);
    throw new TuskValidationError(path, `must be a plain object (got ${got})`);
  }
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  // again, with the values in the issues: reportInput makes parsing ~3 times slower
  const issues = schema.safeParse(value, { reportInput: true }).error?.issues ?? result.error.issues;
  const [first] = issues;
  if (!first) throw new TuskValidationError(field, 'is invalid');
  const { issue, at } = furthest(typoBehind(first, issues));
  const path = [field, ...at.map(String)].join('.');
  if (issue.code === 'unrecognized_keys') {
    throw new TuskValidationError(path, unknownOptions(issue.keys, keysAt(schema, at)));
  }
  // zod's own type messages ("Invalid input: expected string, received number"), in ours
  if (issue.code === 'invalid_type' && issue.message.startsWith('Invalid input')) {
    const article = /^[aeiou]/.test(issue.expected) ? 'an' : 'a';
    throw new TuskValidationError(path, `must be ${article} ${issue.expected} (got ${describe(issue.input)})`);
  }
  throw new TuskValidationError(path, issue.message);
}

/**
 * A required field reported missing next to an unknown one in the same object is most
 * likely that one misspelt (`per` for `perMs`): the unknown key is the better report.
 */
function typoBehind(first: Issue, issues: readonly Issue[]): Issue {
  if (first.input !== undefined || first.path.length === 0) return first;
  const parent = first.path.slice(0, -1).join('\u0000');
  return issues.find((i) => i.code === 'unrecognized_keys' && i.path.join('\u0000') === parent) ?? first;
}

type Issue = z.core.$ZodIssue;

/**
 * The issue to report and its full path: for a value no branch of a union took, the issue
 * of the branch that got furthest (a task definition refused for its timeoutMs, not for
 * not being a function).
 */
export function furthest(issue: Issue, prefix: PropertyKey[] = []): { issue: Issue; at: PropertyKey[] } {
  const at = [...prefix, ...issue.path];
  // a record's key refused: its own issue says why
  if (issue.code === 'invalid_key' && issue.issues[0]) return furthest(issue.issues[0], at);
  if (issue.code !== 'invalid_union' || issue.errors.length === 0) return { issue, at };
  let best: Issue | undefined;
  for (const branch of issue.errors) {
    const first = branch[0];
    if (first && (!best || first.path.length > best.path.length)) best = first;
  }
  if (!best || best.path.length === 0) return { issue, at };
  return furthest(best, at);
}

/**
 * Where `value` holds a class instance (a Date, a Map...) where `schema` wants a plain
 * object: zod would read it as one, taking a Date for an empty set of options.
 */
function nonPlainAt(
  schema: unknown,
  value: unknown,
  path: PropertyKey[],
): { path: PropertyKey[]; value: unknown } | null {
  if (value === null || typeof value !== 'object') return null;
  const def = defOf(schema);
  switch (def?.type) {
    case 'optional':
    case 'nullable':
    case 'default':
      return nonPlainAt(def.innerType, value, path);
    case 'pipe':
      return nonPlainAt(def.in, value, path);
    case 'union':
      for (const option of def.options as unknown[]) {
        const found = nonPlainAt(option, value, path);
        if (found) return found;
      }
      return null;
    case 'object': {
      const proto = Object.getPrototypeOf(value);
      // arrays are refused by zod itself, as not objects
      if (proto !== Object.prototype && proto !== null && !Array.isArray(value)) return { path, value };
      for (const [key, child] of objectFields(def)) {
        const found = nonPlainAt(child, (value as Record<string, unknown>)[key], [...path, key]);
        if (found) return found;
      }
      return null;
    }
    case 'array': {
      if (!Array.isArray(value) || !holdsObjects(def.element)) return null;
      for (const [i, item] of value.entries()) {
        const found = nonPlainAt(def.element, item, [...path, i]);
        if (found) return found;
      }
      return null;
    }
    default:
      return null;
  }
}

const fieldsCache = new WeakMap<Def, Array<[string, unknown]>>();

/** The fields of an object schema that may hold objects (`retry`, `source`): the only ones nonPlainAt visits. */
function objectFields(def: Def): Array<[string, unknown]> {
  let fields = fieldsCache.get(def);
  if (!fields) {
    fields = Object.entries(def.shape as Record<string, unknown>).filter(([, child]) => holdsObjects(child));
    fieldsCache.set(def, fields);
  }
  return fields;
}

function holdsObjects(schema: unknown): boolean {
  const def = defOf(schema);
  switch (def?.type) {
    case 'object':
      return true;
    case 'optional':
    case 'nullable':
    case 'default':
      return holdsObjects(def.innerType);
    case 'pipe':
      return holdsObjects(def.in);
    case 'union':
      return (def.options as unknown[]).some(holdsObjects);
    case 'array':
      return holdsObjects(def.element);
    default:
      return false;
  }
}

/** `unknown option "delay" (did you mean "delayMs"?)`, given the options `known`, if known. */
export function unknownOptions(keys: readonly string[], known: string[] | null): string {
  const guess = keys.length === 1 && known ? closest(keys[0] as string, known) : null;
  const hint = guess ? ` (did you mean ${JSON.stringify(guess)}?)` : '';
  return `unknown option${keys.length > 1 ? 's' : ''} ${keys.map((k) => JSON.stringify(k)).join(', ')}${hint}`;
}

type Def = Record<string, unknown> & { type: string };
const defOf = (schema: unknown): Def | undefined => (schema as { _zod?: { def: Def } } | undefined)?._zod?.def;

/** The keys of the object schema at `path` inside `schema`, if it is one. */
export function keysAt(schema: unknown, path: PropertyKey[]): string[] | null {
  const def = defOf(schema);
  if (!def) return null;
  if (['optional', 'nullable', 'default'].includes(def.type)) return keysAt(def.innerType, path);
  if (def.type === 'pipe') return keysAt(def.in, path);
  if (def.type === 'union') {
    for (const option of def.options as unknown[]) {
      const keys = keysAt(option, path);
      if (keys) return keys;
    }
    return null;
  }
  const [segment, ...rest] = path;
  if (segment === undefined) return def.type === 'object' ? Object.keys(def.shape as object) : null;
  if (def.type === 'object') return keysAt((def.shape as Record<PropertyKey, unknown>)[segment], rest);
  if (def.type === 'array') return keysAt(def.element, rest);
  if (def.type === 'record') return keysAt(def.valueType, rest);
  return null;
}

/** The known key `key` is likely a typo of: a prefix either way, or at most 2 edits away. */
export function closest(key: string, known: string[]): string | null {
  const lower = key.toLowerCase();
  let best: string | null = null;
  let bestDistance = 3;
  for (const candidate of known) {
    const c = candidate.toLowerCase();
    const prefix = (lower.length >= 3 && c.startsWith(lower)) || (c.length >= 3 && lower.startsWith(c));
    const distance = prefix ? 1 : editDistance(lower, c);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row[j] = Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, (previous[j - 1] as number) + cost);
    }
    previous = row;
  }
  return previous[b.length] as number;
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
  if (typeof value !== 'object') return `a ${typeof value}`;
  const proto = Object.getPrototypeOf(value);
  const name = proto === Object.prototype || proto === null ? '' : proto?.constructor?.name;
  return name ? `${/^[AEIOU]/.test(name) ? 'an' : 'a'} ${name}` : 'an object';
}
