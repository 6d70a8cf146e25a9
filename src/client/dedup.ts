import { createHash } from 'node:crypto';

/** JSON with object keys sorted at every level: equal values give equal text. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  if (value !== null && typeof value === 'object' && !(value instanceof Date)) {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * The dedup key `dedupe: true` derives from a job: its task, payload and source type and
 * id if it has one (the tenant is part of the index).
 */
export function derivedDedupKey(task: string, payload: unknown, source?: [type: string, id: string]): string {
  const hash = createHash('sha256').update(task).update('\u0000').update(canonicalJson(payload));
  if (source) hash.update('\u0000').update(source[0]).update('\u0000').update(source[1]);
  return `sha256:${hash.digest('hex')}`;
}
