import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** An API token's record (never the token itself: only its hash is stored). */
export interface TokenRow {
  id: number;
  name: string;
  /** null: an admin token. */
  tenant: string | null;
  prefix: string;
  /** What it may do: enqueue, read, manage, lease, metrics, admin. */
  scopes: string[];
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

const COLUMNS = 'id, name, tenant, prefix, scopes, created_at, last_used_at, revoked_at';

export async function insertToken(
  db: Queryable,
  schema: string,
  token: { name: string; tenant: string | null; scopes: string[]; hash: Buffer; prefix: string },
): Promise<TokenRow> {
  const { rows } = await db.query<TokenRow>(
    `INSERT INTO ${ident(schema)}.api_tokens (name, tenant, scopes, token_hash, prefix) VALUES ($1, $2, $3, $4, $5)
     RETURNING ${COLUMNS}`,
    [token.name, token.tenant, token.scopes, token.hash, token.prefix],
  );
  return rows[0] as TokenRow;
}

export async function selectTokens(db: Queryable, schema: string): Promise<TokenRow[]> {
  const { rows } = await db.query<TokenRow>(`SELECT ${COLUMNS} FROM ${ident(schema)}.api_tokens ORDER BY id`);
  return rows;
}

/** Revokes a token; false if there is no such token or it was revoked already. */
export async function revokeToken(db: Queryable, schema: string, id: number): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE ${ident(schema)}.api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`,
    [id],
  );
  return (rowCount ?? 0) > 0;
}

/**
 * The live token with this hash, or null. Notes its use, at most once a minute (see
 * find_token: the server's database role reads tokens only through it).
 */
export async function findToken(
  db: Queryable,
  schema: string,
  hash: Buffer,
): Promise<{ id: number; tenant: string | null; scopes: string[] } | null> {
  const { rows } = await db.query<{ id: number; tenant: string | null; scopes: string[] }>(
    `SELECT id, tenant, scopes FROM ${ident(schema)}.find_token($1)`,
    [hash],
  );
  return rows[0] ?? null;
}

/**
 * The hashes of the live tokens: few (an operator makes them), so the server keeps them
 * to turn away unknown tokens without a query each.
 */
export async function liveTokenHashes(db: Queryable, schema: string): Promise<Buffer[]> {
  const { rows } = await db.query<{ token_hash: Buffer }>(
    `SELECT h AS token_hash FROM ${ident(schema)}.live_token_hashes() h`,
  );
  return rows.map((r) => r.token_hash);
}
