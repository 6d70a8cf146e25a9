import type { JobError } from '../types.js';

const MAX_MESSAGE = 2000;
const MAX_STACK = 4000;

/**
 * What is kept of a failed attempt's error: message, name, stack (bounded) and attempt.
 * Handlers may throw anything; non-Error values are described, not lost.
 */
export function errorRecord(error: unknown, attempt: number): JobError {
  const at = new Date().toISOString();
  if (error instanceof Error) {
    const record: JobError = { attempt, name: error.name, message: error.message.slice(0, MAX_MESSAGE), at };
    if (error.stack) record.stack = error.stack.slice(0, MAX_STACK);
    return record;
  }
  return { attempt, name: 'NonError', message: `a non-Error value was thrown: ${describeThrown(error)}`, at };
}

function describeThrown(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.slice(0, MAX_MESSAGE));
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json.slice(0, MAX_MESSAGE);
  } catch {
    // circular or BigInt: fall through
  }
  try {
    return String(value).slice(0, MAX_MESSAGE);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
