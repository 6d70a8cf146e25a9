import type { QueryResultRow } from 'pg';

/**
 * The one method Tusk needs from a connection: a `pg` Pool, Client or PoolClient, or any
 * object with the same `query(text, values)` (e.g. a client inside your transaction).
 *
 * @example
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await tusk.enqueue('send_email', { to }, { client }); // commits or rolls back with you
 * await client.query('COMMIT');
 */
export interface Queryable {
  query<R extends QueryResultRow = QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount?: number | null }>;
}

/** True when `value` has a callable `query` method. */
export function isQueryable(value: unknown): value is Queryable {
  return typeof value === 'object' && value !== null && typeof (value as { query?: unknown }).query === 'function';
}

/** A pg Pool or Client: also takes `{ name, text, values }` (a prepared statement). */
export interface PreparedQueryable {
  query<R extends QueryResultRow = QueryResultRow>(config: {
    name: string;
    text: string;
    values: unknown[];
  }): Promise<{ rows: R[] }>;
}
