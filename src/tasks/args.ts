import { TuskValidationError } from '../errors.js';
import { describe } from '../validation/validate.js';

/**
 * A type as it may travel to a job as an argument: JSON data. Functions, symbols, BigInt,
 * Dates, Maps, Sets and other objects with methods become `never` (any argument holding
 * one is a type error); `any` and `unknown` stay as they are and are checked at run time.
 */
export type Json<T> = 0 extends 1 & T
  ? T
  : T extends string | number | boolean | null | undefined
    ? T
    : T extends bigint | symbol | Date | ((...args: never[]) => unknown)
      ? never
      : T extends readonly unknown[]
        ? { [K in keyof T]: Json<T[K]> }
        : T extends object
          ? { [K in keyof T]: Json<T[K]> }
          : T;

/** A parameter list whose every parameter must be JSON data. */
export type JsonArgs<A extends readonly unknown[]> = { [K in keyof A]: Json<A[K]> };

/**
 * The arguments of a method call sent to a job, checked to come back equal from JSON:
 * plain objects, arrays, strings, finite numbers, booleans and null. Trailing `undefined`
 * arguments are dropped (the method sees them missing, as it would). Throws
 * TuskValidationError naming the argument (`args[1].when`) and what to send instead.
 * Size, NUL characters and lone surrogates are checked with the payload.
 */
export function jsonArgs(args: unknown[], call: string): unknown[] {
  let end = args.length;
  while (end > 0 && args[end - 1] === undefined) end--;
  const sent = args.slice(0, end);
  const ancestors = new Set<object>();
  const check = (value: unknown, path: string): void => {
    const refused = (what: string) => new TuskValidationError(path, `${call} is called with JSON data: ${what}`);
    switch (typeof value) {
      case 'string':
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(value)) throw refused(`${value} is not JSON`);
        return;
      case 'undefined':
        // in objects JSON leaves it out, as an optional property; in arrays it would be null
        if (path.endsWith(']')) throw refused('undefined would arrive as null: send null');
        return;
      case 'bigint':
        throw refused(`got ${describe(value)}: send it as a string`);
      case 'function':
      case 'symbol':
        throw refused(`got a ${typeof value}`);
    }
    if (value === null) return;
    const object = value as object;
    if (value instanceof Date) throw refused('got a Date: send date.toISOString() and parse it in the method');
    const proto = Object.getPrototypeOf(object);
    if (!Array.isArray(object) && proto !== Object.prototype && proto !== null) {
      throw refused(
        `got an instance of ${proto?.constructor?.name || 'a class'}: send plain objects (its id, or its fields)`,
      );
    }
    if (ancestors.has(object)) throw refused('it contains a circular reference');
    ancestors.add(object);
    if (Array.isArray(object)) for (const [i, item] of object.entries()) check(item, `${path}[${i}]`);
    else for (const [key, item] of Object.entries(object)) check(item, `${path}.${key}`);
    ancestors.delete(object);
  };
  for (const [i, arg] of sent.entries()) check(arg, `args[${i}]`);
  return sent;
}
