import { TuskValidationError } from '../errors.js';
import { describe } from './validate.js';

/** Default limit of a payload (or result) as JSON: 1 MiB. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;
/** Highest `maxPayloadBytes` accepted: 256 MiB. */
export const MAX_PAYLOAD_BYTES_LIMIT = 256 * 1024 * 1024;

/** Deepest nesting of arrays and objects accepted (JSON.stringify overflows the stack at ~2 500). */
export const MAX_JSON_DEPTH = 1000;

const TOO_DEEP = `must not be nested deeper than ${MAX_JSON_DEPTH} levels`;

/** Thrown by the fast check; `locate` then finds and names the bad value. */
const REFUSED = Symbol('refused');
/** Arrays and objects the last toJson saw: nesting cannot be deeper, so most payloads skip the depth scan. */
let containers = 0;

/**
 * `value` as JSON text that PostgreSQL's jsonb stores exactly, or a TuskValidationError
 * naming the bad value's path under `field` (`payload.items[2].when`). Refused, because
 * JSON would silently change them or jsonb cannot store them: NaN and ±Infinity, BigInt,
 * functions and symbols, `undefined` inside arrays (and array holes), invalid Dates,
 * Maps, Sets, typed arrays, Errors and other built-ins JSON writes as `{}`, symbol keys,
 * circular references, nesting deeper than MAX_JSON_DEPTH, NUL characters and lone
 * surrogates (in strings or keys), and JSON over `maxBytes`. Accepted as JSON defines
 * them: `undefined` properties are left out, Dates (and anything with `toJSON`) become
 * what `toJSON` returns, class instances their own enumerable fields, -0 is 0.
 * `undefined` itself is `null`.
 */
export function toJson(value: unknown, field: string, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES): string {
  if (value === undefined) return 'null';
  let json: string | undefined;
  containers = 0;
  try {
    json = JSON.stringify(value, check);
  } catch (error) {
    throw refusal(value, field, error);
  }
  if (json === undefined) throw new TuskValidationError(field, `must be JSON data (got ${describe(value)})`);
  if (json.length > maxBytes / 3 && Buffer.byteLength(json) > maxBytes) {
    throw new TuskValidationError(
      field,
      `is ${Buffer.byteLength(json)} bytes as JSON, over the limit of ${maxBytes} (option maxPayloadBytes)`,
    );
  }
  // NUL in strings, and NUL or lone surrogates in keys (values were checked), are escapes
  if (json.includes('\\u') && hasEscape(json, /\\u(0000|d[89a-f])/g)) throw refusal(value, field, null);
  if (containers > MAX_JSON_DEPTH && tooDeep(json)) throw new TuskValidationError(field, TOO_DEEP);
  return json;
}

/** JSON.stringify's replacer: the cheap checks, on every value. */
function check(this: unknown, key: string, value: unknown): unknown {
  switch (typeof value) {
    case 'number':
      if (!Number.isFinite(value)) throw REFUSED;
      return value;
    case 'string':
      if (!value.isWellFormed()) throw REFUSED;
      return value;
    case 'function':
    case 'symbol':
    case 'bigint':
      throw REFUSED;
    case 'undefined':
      if (Array.isArray(this)) throw REFUSED;
      return value;
    case 'object':
      if (value === null) {
        // an invalid Date's toJSON gives null
        if ((this as Record<string, unknown>)[key] instanceof Date) throw REFUSED;
        return value;
      }
      containers++;
      if (!Array.isArray(value) && (lossy(value) || hasSymbolKeys(value))) throw REFUSED;
      return value;
    default:
      return value;
  }
}

/** Built-ins whose data JSON loses (it writes `{}`, or an object of indexes), and what to send instead. */
function lossy(value: object): string | null {
  const proto = Object.getPrototypeOf(value);
  if (proto === Object.prototype || proto === null) return null;
  if (value instanceof Map) return 'a Map (JSON would store {}): send Object.fromEntries(map)';
  if (value instanceof Set) return 'a Set (JSON would store {}): send [...set]';
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof SharedArrayBuffer) {
    return `a ${value.constructor?.name ?? 'binary buffer'} (JSON would store an object of indexes): send Array.from(it) or a base64 string`;
  }
  if (value instanceof Error) return `an ${value.name || 'Error'} (JSON would store {}): send its message`;
  if (value instanceof RegExp) return 'a RegExp (JSON would store {}): send its source';
  for (const kind of [WeakMap, WeakSet, WeakRef, Promise]) {
    if (value instanceof kind) return `a ${kind.name} (JSON would store {})`;
  }
  return null;
}

function hasSymbolKeys(value: object): boolean {
  for (const key of Object.getOwnPropertySymbols(value)) {
    if (Object.prototype.propertyIsEnumerable.call(value, key)) return true;
  }
  return false;
}

/** The error for a value the fast check (or JSON.stringify itself) refused. */
function refusal(value: unknown, field: string, error: unknown): TuskValidationError {
  let found: Problem | null;
  try {
    found = locate(value, '', field, 0, new Set());
    // the path of a value 1 000 levels down says nothing more than the field does
    if (found?.message === TOO_DEEP) found.path = field;
  } catch (walkError) {
    found = { path: field, message: `is not JSON data: reading it threw ${String(walkError)}` };
  }
  if (found) return new TuskValidationError(found.path, found.message);
  const message = error === null || error === REFUSED ? 'is refused' : String((error as Error)?.message ?? error);
  return new TuskValidationError(field, `is not JSON data: ${message}`);
}

interface Problem {
  path: string;
  message: string;
}

/**
 * The first value JSON would change or jsonb refuse, walked as JSON.stringify walks it
 * (toJSON first, own enumerable keys). Slow, so only run once something was refused.
 */
function locate(
  raw: unknown,
  key: string,
  path: string,
  depth: number,
  ancestors: Set<object>,
  inArray = false,
): Problem | null {
  const at = (message: string): Problem => ({ path, message });
  if (raw instanceof Date && Number.isNaN(raw.getTime()))
    return at('must not be an invalid Date (JSON would store null)');
  const toJSON = (raw as { toJSON?: unknown } | null | undefined)?.toJSON;
  const value = typeof toJSON === 'function' ? toJSON.call(raw, key) : raw;
  switch (typeof value) {
    case 'number':
      return Number.isFinite(value) ? null : at(`must not be ${value} (JSON would store null)`);
    case 'bigint':
      return at('must not be a BigInt (JSON has none): send it as a string');
    case 'function':
    case 'symbol':
      return at(`must not be a ${typeof value} (JSON would leave it out)`);
    case 'undefined':
      return inArray ? at('must not be undefined inside an array (JSON would store null): use null') : null;
    case 'string':
      return badText(value) ? at(`must not contain ${badText(value)}`) : null;
    case 'boolean':
      return null;
  }
  if (value === null) return null;
  const object = value as object;
  if (ancestors.has(object)) return at('must not be a circular reference (it contains itself)');
  if (depth >= MAX_JSON_DEPTH) return at(TOO_DEEP);
  if (Array.isArray(object)) {
    ancestors.add(object);
    for (let i = 0; i < object.length; i++) {
      const found = locate(object[i], String(i), `${path}[${i}]`, depth + 1, ancestors, true);
      if (found) return found;
    }
    ancestors.delete(object);
    return null;
  }
  const kind = lossy(object);
  if (kind) return at(`must not be ${kind}`);
  if (hasSymbolKeys(object)) return at('must not have symbol keys (JSON would leave them out)');
  ancestors.add(object);
  for (const name of Object.keys(object)) {
    const bad = badText(name);
    if (bad) return at(`must not have a key with ${bad} (${JSON.stringify(name)})`);
    const found = locate((object as Record<string, unknown>)[name], name, childPath(path, name), depth + 1, ancestors);
    if (found) return found;
  }
  ancestors.delete(object);
  return null;
}

/** What jsonb cannot store in a string, or null. */
function badText(s: string): string | null {
  if (!s.isWellFormed()) return 'lone surrogates (PostgreSQL cannot store them)';
  if (s.includes('\u0000')) return 'NUL characters (\\u0000): PostgreSQL cannot store them';
  return null;
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** `payload.a`, or `payload["odd key"]`. */
export const childPath = (path: string, key: string): string =>
  IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;

/** True when a match of `pattern` in `json` is an escape (not an escaped backslash, then text). */
function hasEscape(json: string, pattern: RegExp): boolean {
  for (const match of json.matchAll(pattern)) {
    let backslashes = 0;
    for (let j = match.index - 1; j >= 0 && json[j] === '\\'; j--) backslashes++;
    if (backslashes % 2 === 0) return true;
  }
  return false;
}

/** True when JSON text nests arrays and objects deeper than MAX_JSON_DEPTH. */
function tooDeep(json: string): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c === 92)
        i++; // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 91 || c === 123) {
      if (++depth > MAX_JSON_DEPTH) return true;
    } else if (c === 93 || c === 125) depth--;
  }
  return false;
}
