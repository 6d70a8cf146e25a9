import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** An API token's record (never the token itself: only its hash is stored). */
export interface TokenRow {
  id: number;
  name: string;
  /** null: an admin token. */
  tenant: string | null;
  prefix: string;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

const COLUMNS = 'id, name, tenant, prefix, created_at, last_used_at, revoked_at';

export async function insertToken(
  db: Queryable,
  schema: string,
  token: { name: string; tenant: string | null; hash: Buffer; prefix: string },
): Promise<TokenRow> {
  const { rows } = await db.query<TokenRow>(
    `INSERT INTO ${ident(schema)}.api_tokens (name, tenant, token_hash, prefix) VALUES ($1, $2, $3, $4)
     RETURNING ${COLUMNS}`,
    [token.name, token.tenant, token.hash, token.prefix],
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
 * The live token with this hash, or null. Notes its use, at most once a minute, so that
 * busy clients do not turn every request into a write.
 */
export async function findToken(
  db: Queryable,
  schema: string,
  hash: Buffer,
): Promise<{ id: number; tenant: string | null } | null> {
  const s = ident(schema);
  const { rows } = await db.query<{ id: number; tenant: string | null }>(
    `WITH t AS (SELECT id, tenant, last_used_at FROM ${s}.api_tokens WHERE token_hash = $1 AND revoked_at IS NULL),
     touched AS (
       UPDATE ${s}.api_tokens a SET last_used_at = now() FROM t
       WHERE a.id = t.id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'))
     SELECT id, tenant FROM t`,
    [hash],
  );
  return rows[0] ?? null;
}

/** True when at least one token is live (then the API asks every caller for one). */
export async function anyLiveToken(db: Queryable, schema: string): Promise<boolean> {
  const { rows } = await db.query<{ any: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM ${ident(schema)}.api_tokens WHERE revoked_at IS NULL) AS any`,
  );
  return rows[0]?.any ?? false;
}
