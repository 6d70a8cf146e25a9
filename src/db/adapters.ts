import type { QueryResultRow } from 'pg';
import { TuskValidationError } from '../errors.js';
import { importPeer } from '../peer.js';
import { isQueryable, type Queryable } from './queryable.js';

/**
 * What `client` (and `stage`'s transaction) may be: a `pg` Client/PoolClient inside BEGIN
 * (or a Pool, outside any transaction), a Kysely transaction, a Drizzle transaction, or
 * any object with `query(text, values)` resolving to `{ rows }` or to an array of rows.
 * Kysely and Drizzle are recognised by shape and loaded only when one is passed, so
 * neither is needed by users of the other (both are optional peer dependencies).
 *
 * @example
 * await db.transaction().execute(async (trx) => {           // Kysely
 *   await trx.insertInto('orders').values(order).execute();
 *   await tusk.enqueue('ship', { orderId: order.id }, { client: trx });
 * });
 * await drizzleDb.transaction(async (tx) => {                 // Drizzle
 *   await tx.insert(orders).values(order);
 *   await tusk.enqueue('ship', { orderId: order.id }, { client: tx });
 * });
 */
export type TransactionLike = Queryable | KyselyLike | DrizzleLike | QueryFunctionLike;

/** The part of a Kysely instance or transaction used: `executeQuery`. */
export interface KyselyLike {
  executeQuery(query: unknown): Promise<{ rows: unknown[] }>;
  selectFrom(...args: never[]): unknown;
}

/** The part of a Drizzle database or transaction used: `execute`. */
export interface DrizzleLike {
  execute(query: never): PromiseLike<unknown>;
  select(...args: never[]): unknown;
}

/** Any client whose `query(text, values)` resolves to `{ rows }` or to the rows. */
export interface QueryFunctionLike {
  query(text: string, values?: unknown[]): PromiseLike<unknown>;
}

export const SUPPORTED_CLIENTS =
  'a pg Client or PoolClient (inside BEGIN), a pg Pool, a Kysely transaction, a Drizzle transaction, ' +
  'or an object with a query(text, values) method';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;
const hasMethod = (v: Record<string, unknown>, name: string) => typeof v[name] === 'function';

/** Kysely instances and transactions: executeQuery plus the query builder. */
export const isKysely = (v: unknown): v is KyselyLike =>
  isObject(v) && hasMethod(v, 'executeQuery') && hasMethod(v, 'selectFrom');

/** Drizzle databases and transactions: execute plus the query builder. */
export const isDrizzle = (v: unknown): v is DrizzleLike =>
  isObject(v) && hasMethod(v, 'execute') && hasMethod(v, 'select') && !hasMethod(v, 'query');

/** True for every kind `toQueryable` accepts. */
export const isTransactionLike = (v: unknown): v is TransactionLike => isQueryable(v) || isKysely(v) || isDrizzle(v);

/**
 * The caller's connection as the `query(text, values)` Tusk's query layer speaks.
 * A `pg` connection is returned as it is (it keeps prepared statements and COPY).
 * Throws a TuskValidationError naming the supported kinds for anything else.
 */
export function toQueryable(client: unknown, field = 'options.client'): Queryable {
  if (isKysely(client)) return kyselyQueryable(client);
  if (isDrizzle(client)) return drizzleQueryable(client);
  if (isQueryable(client)) return rowsOf(client) ? client : normalised(client);
  throw new TuskValidationError(field, `must be ${SUPPORTED_CLIENTS} (got ${clientKind(client)})`);
}

/** pg's clients answer `{ rows }` already; others (postgres.js and the like) may answer rows. */
const rowsOf = (client: object) => 'connect' in client || 'release' in client;

function normalised(client: QueryFunctionLike): Queryable {
  return {
    async query<R extends QueryResultRow>(text: string, values?: unknown[]) {
      return asResult<R>(await client.query(text, values), 'query(text, values)');
    },
  };
}

function kyselyQueryable(trx: KyselyLike): Queryable {
  return {
    async query<R extends QueryResultRow>(text: string, values: unknown[] = []) {
      const { CompiledQuery } = await loadPeer<typeof import('kysely')>('kysely', 'a Kysely transaction');
      const result = await trx.executeQuery(CompiledQuery.raw(text, values));
      return { rows: result.rows as R[] };
    },
  };
}

function drizzleQueryable(tx: DrizzleLike): Queryable {
  return {
    async query<R extends QueryResultRow>(text: string, values: unknown[] = []) {
      const { sql } = await loadPeer<typeof import('drizzle-orm')>('drizzle-orm', 'a Drizzle transaction');
      // $n placeholders become Drizzle params (each value one parameter, arrays included)
      const chunks = text
        .split(/\$(\d+)/)
        .map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.param(values[+part - 1])));
      const result = await tx.execute(sql.join(chunks) as never);
      return asResult<R>(result, 'execute()');
    },
  };
}

/** `{ rows }` (node-postgres and most drivers) or an array of rows (postgres.js). */
function asResult<R>(result: unknown, what: string): { rows: R[] } {
  if (Array.isArray(result)) return { rows: result as R[] };
  if (isObject(result) && Array.isArray(result.rows)) return { rows: result.rows as R[] };
  throw new TuskValidationError('options.client', `${what} must resolve to { rows } or an array of rows`);
}

/** Loads kysely or drizzle-orm, with an error that says why it is needed. */
const loadPeer = <T>(name: string, passed: string) =>
  importPeer<T>(
    name,
    (error) =>
      new TuskValidationError(
        'options.client',
        `looks like ${passed}, but the package "${name}" could not be loaded (${error.message})`,
      ),
  );

/** What a rejected client is, for the error message. */
export function clientKind(v: unknown): string {
  if (v === null) return 'null';
  if (!isObject(v)) return typeof v;
  const name = (v.constructor as { name?: string } | undefined)?.name;
  return name && name !== 'Object' ? `a ${name}` : 'an object without query(), executeQuery() or execute()';
}
