import type { z } from 'zod';
import { TuskValidationError } from '../errors.js';
import { describe } from './describe.js';

// Turns zod's issues into one TuskValidationError naming the field, worded for people.

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
