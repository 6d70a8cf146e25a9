import { TuskValidationError } from '../errors.js';
import { describe } from './validate.js';

/** Default limit of a payload (or result) as JSON: 1 MiB. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

/**
 * `value` as JSON text that PostgreSQL's jsonb stores exactly, or a TuskValidationError
 * naming `field`. Refused, because JSON would silently change them: NaN and ±Infinity
 * (JSON writes null), BigInt, functions and symbols, circular references, NUL characters
 * and lone surrogates (jsonb rejects both). Accepted as JSON defines them: `undefined`
 * properties are left out and Dates become ISO strings. `undefined` itself is `null`.
 */
export function toJson(value: unknown, field: string, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES): string {
  if (value === undefined) return 'null';
  let json: string | undefined;
  try {
    json = JSON.stringify(value, check);
  } catch (error) {
    if (error instanceof TuskValidationError) throw new TuskValidationError(field, error.message);
    const message = (error as Error).message;
    if (/circular/i.test(message)) throw new TuskValidationError(field, 'must not contain circular references');
    if (/bigint/i.test(message)) throw new TuskValidationError(field, 'must not contain BigInt values');
    throw new TuskValidationError(field, `is not JSON-serialisable: ${message}`);
  }
  if (json === undefined) throw new TuskValidationError(field, `must be JSON-serialisable (got ${describe(value)})`);
  if (json.length > maxBytes / 3 && Buffer.byteLength(json) > maxBytes) {
    throw new TuskValidationError(
      field,
      `is ${Buffer.byteLength(json)} bytes as JSON, over the limit of ${maxBytes} (option maxPayloadBytes)`,
    );
  }
  if (json.includes('\\u0000') && hasNulEscape(json)) {
    throw new TuskValidationError(field, 'must not contain NUL characters (\\u0000): PostgreSQL cannot store them');
  }
  return json;
}

function check(this: unknown, key: string, value: unknown): unknown {
  switch (typeof value) {
    case 'number':
      if (!Number.isFinite(value)) throw new TuskValidationError(where(key), `must not contain ${value}`);
      return value;
    case 'string':
      if (!value.isWellFormed()) throw new TuskValidationError(where(key), 'must not contain lone surrogates');
      return value;
    case 'function':
    case 'symbol':
      throw new TuskValidationError(where(key), `must not contain a ${typeof value}`);
    default:
      return value;
  }
}

const where = (key: string) => (key === '' ? 'value' : `property ${JSON.stringify(key)}`);

/** True when `json` has a `\u0000` escape (not an escaped backslash followed by u0000). */
function hasNulEscape(json: string): boolean {
  for (let i = json.indexOf('\\u0000'); i !== -1; i = json.indexOf('\\u0000', i + 1)) {
    let backslashes = 0;
    for (let j = i - 1; j >= 0 && json[j] === '\\'; j--) backslashes++;
    if (backslashes % 2 === 0) return true;
  }
  return false;
}
