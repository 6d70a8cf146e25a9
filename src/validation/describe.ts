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
