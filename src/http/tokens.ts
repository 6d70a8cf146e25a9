import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { Queryable } from '../db/queryable.js';
import {
  findToken,
  insertToken,
  liveTokenHashes,
  revokeToken,
  selectTokens,
  type TokenRow,
} from '../queries/apiTokens.js';
import { nameSchema, parse, storableText, stringSchema } from '../validation/validate.js';
import { parseScopes, type Scope, TENANT_SCOPES } from './scopes.js';

/**
 * Who a request acts as: whose jobs it sees (`tenant`; null: every tenant's) and what it
 * may do with them (`scopes`).
 */
export interface Principal {
  /** null: every tenant. */
  tenant: string | null;
  scopes: ReadonlySet<Scope>;
  /** What the request rate limit counts by: one token (or the admin token, or the local caller). */
  key: string;
}

/** A token's record, as listed (the token itself is never stored). */
export interface TokenInfo {
  id: number;
  name: string;
  /** null: every tenant's jobs. */
  tenant: string | null;
  /** What it may do (see docs/http.md, token scopes). */
  scopes: Scope[];
  /** The token's first characters, to tell it apart. */
  prefix: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

const PREFIX = 'tusk_';
/** The shape of the tokens `create` makes: anything else is refused without a query. */
const TOKEN_FORMAT = /^tusk_[\w-]{43}$/;
/** Unknown tokens read the live ones again at most this often. */
const RELOAD_MS = 1_000;
/** How long a verified token is taken on trust: its revocation by another process counts within this. */
const VERIFIED_MS = 1_000;
/** Verified tokens kept at most (all forgotten past it: they are few, an operator makes them). */
const MAX_VERIFIED = 10_000;

const createSchema = z.strictObject({
  tenant: nameSchema(128).optional(),
  name: storableText(stringSchema().max(200, 'must be at most 200 characters')).optional(),
  scopes: z.union([z.string(), z.array(z.string())]).optional(),
});

/** SHA-256 of a token: tokens are 32 random bytes, so no salt or slow hash is needed. */
export const hashToken = (token: string): Buffer => createHash('sha256').update(token).digest();

/** A principal with every scope: the admin token, or every caller of a server without auth. */
export const adminPrincipal = (key: string): Principal => ({ tenant: null, scopes: new Set(['admin']), key });

interface Live {
  hashes: Set<string>;
  at: number;
}

/**
 * API tokens of the HTTP server, stored hashed in the schema. A token sees its tenant's
 * jobs (or, without a tenant, every tenant's) and may do what its scopes say: by default
 * everything on its tenant's jobs, or admin without a tenant.
 *
 * @example
 * const { token } = await new ApiTokens(() => tusk.pool(), tusk.schema).create({ tenant: 'acme', scopes: 'enqueue+read' });
 * // show `token` once: only its hash is kept
 */
export class ApiTokens {
  readonly #db: () => Promise<Queryable>;
  readonly #schema: string;
  /** The hashes of the live tokens, as last read. */
  #live: Live | null = null;
  #loading: Promise<Live> | null = null;
  /** Tokens verified lately, by hash: a flood of requests with one costs one lookup a second. */
  readonly #verified = new Map<string, { principal: Principal; at: number }>();
  /** Counts this process's revocations: a lookup begun before one is not kept. */
  #revocations = 0;

  constructor(db: () => Promise<Queryable>, schema: string) {
    this.#db = db;
    this.#schema = schema;
  }

  /**
   * Creates a token; returns it (the only time it can be seen) and its record. `scopes`:
   * `'enqueue+read'` or `['enqueue', 'read']`; default everything on the tenant's jobs
   * (`enqueue+read+manage+lease`), or `admin` for a token without a tenant.
   */
  async create(
    options: { tenant?: string; name?: string; scopes?: string | readonly string[] } = {},
  ): Promise<{ token: string; info: TokenInfo }> {
    const o = parse(createSchema, options, 'options');
    const tenant = o.tenant ?? null;
    const scopes = o.scopes === undefined ? defaultScopes(tenant) : parseScopes(o.scopes, tenant, 'options.scopes');
    const token = PREFIX + randomBytes(32).toString('base64url');
    const hash = hashToken(token);
    const row = await insertToken(await this.#db(), this.#schema, {
      name: o.name ?? '',
      tenant,
      scopes,
      hash,
      prefix: token.slice(0, PREFIX.length + 6),
    });
    this.#live?.hashes.add(hash.toString('base64'));
    return { token, info: toTokenInfo(row) };
  }

  async list(): Promise<TokenInfo[]> {
    return (await selectTokens(await this.#db(), this.#schema)).map(toTokenInfo);
  }

  /** Revokes a token at once; false if unknown or revoked already. */
  async revoke(id: number): Promise<boolean> {
    const done = await revokeToken(await this.#db(), this.#schema, id);
    this.#live = null;
    this.#revocations++;
    this.#verified.clear();
    return done;
  }

  /**
   * Who the token is, or null for an unknown or revoked one. A token among the live ones
   * is read from the database, then taken on trust for a second (a revocation here counts
   * at once, one by another process within that second): a flood of requests with one
   * token, those its rate limit refuses included, costs one lookup a second. Any other
   * token waits for the next reading of the live tokens, at most one a second, so a flood
   * of made-up tokens costs the database one query a second, and a token made by another
   * process a moment ago is still found.
   */
  async verify(token: string): Promise<Principal | null> {
    if (!TOKEN_FORMAT.test(token)) return null;
    const hash = hashToken(token);
    const key = hash.toString('base64');
    const known = this.#verified.get(key);
    if (known && Date.now() - known.at < VERIFIED_MS) return known.principal;
    if (!this.#live?.hashes.has(key) && !(await this.#reload()).hashes.has(key)) return null;
    const revocations = this.#revocations;
    const row = await findToken(await this.#db(), this.#schema, hash);
    if (!row) {
      this.#verified.delete(key);
      return null;
    }
    const principal = { tenant: row.tenant, scopes: new Set(row.scopes as Scope[]), key: `token ${row.id}` };
    if (this.#verified.size >= MAX_VERIFIED) this.#verified.clear();
    // a revocation meanwhile may have come after the lookup read the token: asked again next time
    if (revocations === this.#revocations) this.#verified.set(key, { principal, at: Date.now() });
    return principal;
  }

  /**
   * True when some token is live. Read at most every `maxAgeMs`: a token created or
   * revoked by another process counts within that time (one created here, at once).
   */
  async anyLive(maxAgeMs = 2_000): Promise<boolean> {
    const live = this.#live && Date.now() - this.#live.at < maxAgeMs ? this.#live : await this.#load();
    return live.hashes.size > 0;
  }

  /** Reads the live tokens again once the last reading is RELOAD_MS old; one at a time. */
  #reload(): Promise<Live> {
    if (this.#loading) return this.#loading;
    const wait = this.#live ? Math.max(0, this.#live.at + RELOAD_MS - Date.now()) : 0;
    this.#loading = new Promise<void>((resolve) => setTimeout(resolve, wait).unref())
      .then(() => this.#load())
      .finally(() => {
        this.#loading = null;
      });
    return this.#loading;
  }

  async #load(): Promise<Live> {
    const at = Date.now();
    const hashes = await liveTokenHashes(await this.#db(), this.#schema);
    this.#live = { hashes: new Set(hashes.map((h) => h.toString('base64'))), at };
    return this.#live;
  }
}

const defaultScopes = (tenant: string | null): Scope[] => (tenant === null ? ['admin'] : [...TENANT_SCOPES]);

function toTokenInfo(row: TokenRow): TokenInfo {
  return {
    id: row.id,
    name: row.name,
    tenant: row.tenant,
    scopes: row.scopes as Scope[],
    prefix: row.prefix,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    revokedAt: row.revoked_at,
  };
}
