import { inspect, types } from 'node:util';
import type { JobError } from '../types.js';

const MAX_MESSAGE = 2000;
const MAX_STACK = 4000;

/**
 * What is kept of a failed attempt's error: message, name, stack (bounded) and attempt.
 * Handlers may throw anything — a string, undefined, a Symbol, a circular object, an
 * Error whose getters throw, a Proxy that throws on every trap — so this never throws:
 * non-Error values are described, and what cannot be read is said so. Text is made
 * storable (NUL and lone surrogates become U+FFFD: jsonb refuses both, and a refused
 * record would fail the whole batch of outcomes it is written with).
 */
export function errorRecord(error: unknown, attempt: number): JobError {
  const at = new Date().toISOString();
  try {
    if (isError(error)) {
      const record: JobError = {
        attempt,
        name: text(read(() => error.name) ?? 'Error', 200),
        message: text(read(() => error.message) ?? '(its message could not be read)', MAX_MESSAGE),
        at,
      };
      const stack = read(() => error.stack);
      if (stack) record.stack = text(stack, MAX_STACK);
      return record;
    }
    return {
      attempt,
      name: 'NonError',
      message: text(`a non-Error value was thrown: ${describe(error)}`, MAX_MESSAGE),
      at,
    };
  } catch {
    return { attempt, name: 'NonError', message: 'a value that cannot be described was thrown', at };
  }
}

/** An Error of this realm or another (a vm context's, whose Error is another class). */
function isError(value: unknown): value is Error {
  try {
    return value instanceof Error || types.isNativeError(value);
  } catch {
    return false; // a Proxy whose getPrototypeOf trap throws
  }
}

/** A property as a string, or undefined if it is missing or reading it throws. */
function read(get: () => unknown): string | undefined {
  try {
    const value = get();
    return value === undefined || value === null ? undefined : typeof value === 'string' ? value : String(value);
  } catch {
    return undefined;
  }
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.slice(0, MAX_MESSAGE));
  // inspect handles circular objects, symbols and BigInt, and shows a Proxy's target without calling its traps
  return inspect(value, { depth: 3, breakLength: Number.POSITIVE_INFINITY, maxArrayLength: 20, maxStringLength: 500 });
}

/** At most `max` characters, storable in jsonb. */
const text = (s: string, max: number): string => s.slice(0, max).toWellFormed().replaceAll('\u0000', '\ufffd');
