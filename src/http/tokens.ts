import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { nameSchema, parse, storableText, stringSchema } from '../client/validate.js';
import type { Queryable } from '../db/queryable.js';
import {
  anyLiveToken,
  findToken,
  insertToken,
  revokeToken,
  selectTokens,
  type TokenRow,
} from '../queries/apiTokens.js';

/** Who a request acts as. */
export type Principal = { role: 'admin' } | { role: 'tenant'; tenant: string };

/** A token's record, as listed (the token itself is never stored). */
export interface TokenInfo {
  id: number;
  name: string;
  /** null: an admin token. */
  tenant: string | null;
  /** The token's first characters, to tell it apart. */
  prefix: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

const PREFIX = 'tusk_';
const createSchema = z.strictObject({
  tenant: nameSchema(128).optional(),
  name: storableText(stringSchema().max(200, 'must be at most 200 characters')).optional(),
});

/** SHA-256 of a token: tokens are 32 random bytes, so no salt or slow hash is needed. */
export const hashToken = (token: string): Buffer => createHash('sha256').update(token).digest();

/**
 * API tokens of the HTTP server, stored hashed in the schema. An admin token may do
 * everything; a tenant token sees and acts on its tenant's jobs only.
 *
 * @example
 * const { token } = await new ApiTokens(() => tusk.pool(), tusk.schema).create({ tenant: 'acme' });
 * // show `token` once: only its hash is kept
 */
export class ApiTokens {
  readonly #db: () => Promise<Queryable>;
  readonly #schema: string;
  #anyLive: { value: boolean; at: number } | null = null;

  constructor(db: () => Promise<Queryable>, schema: string) {
    this.#db = db;
    this.#schema = schema;
  }

  /** Creates a token; returns it (the only time it can be seen) and its record. */
  async create(options: { tenant?: string; name?: string } = {}): Promise<{ token: string; info: TokenInfo }> {
    const o = parse(createSchema, options, 'options');
    const token = PREFIX + randomBytes(32).toString('base64url');
    const row = await insertToken(await this.#db(), this.#schema, {
      name: o.name ?? '',
      tenant: o.tenant ?? null,
      hash: hashToken(token),
      prefix: token.slice(0, PREFIX.length + 6),
    });
    this.#anyLive = null;
    return { token, info: toTokenInfo(row) };
  }

  async list(): Promise<TokenInfo[]> {
    return (await selectTokens(await this.#db(), this.#schema)).map(toTokenInfo);
  }

  /** Revokes a token at once; false if unknown or revoked already. */
  async revoke(id: number): Promise<boolean> {
    const done = await revokeToken(await this.#db(), this.#schema, id);
    this.#anyLive = null;
    return done;
  }

  /** Who the token is, or null for an unknown or revoked one. */
  async verify(token: string): Promise<Principal | null> {
    const row = await findToken(await this.#db(), this.#schema, hashToken(token));
    if (!row) return null;
    return row.tenant === null ? { role: 'admin' } : { role: 'tenant', tenant: row.tenant };
  }

  /**
   * True when some token is live. Cached for `maxAgeMs`: a token created by another
   * process is asked for within that time (one created here, at once).
   */
  async anyLive(maxAgeMs = 2_000): Promise<boolean> {
    const now = Date.now();
    if (this.#anyLive && now - this.#anyLive.at < maxAgeMs) return this.#anyLive.value;
    const value = await anyLiveToken(await this.#db(), this.#schema);
    this.#anyLive = { value, at: now };
    return value;
  }
}

function toTokenInfo(row: TokenRow): TokenInfo {
  return {
    id: row.id,
    name: row.name,
    tenant: row.tenant,
    prefix: row.prefix,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    revokedAt: row.revoked_at,
  };
}
