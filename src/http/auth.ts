import { timingSafeEqual } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import type { Logger } from '../log.js';
import type { AppEnv } from './env.js';
import { HttpError } from './errors.js';
import { formatScopes, type Scope } from './scopes.js';
import { type ApiTokens, adminPrincipal, hashToken, type Principal } from './tokens.js';

/** Who may call an endpoint: anyone, any valid token, or a token with this scope (or admin). */
export type Access = 'public' | 'token' | Scope;

/**
 * How the server authenticates, decided when it is made and never weakened after:
 *
 * - `token`: every caller shows a token (the admin token, or a live one from the
 *   database). With none live, every request is refused, and the log says so.
 * - `none`: asked for explicitly (`auth: 'none'`): every caller is admin; only loopback
 *   Host names and origins are answered.
 * - `local`: no auth was configured: as `none` (the server listens on loopback only)
 *   until a token is created, then `token` for good.
 */
export type AuthMode = 'token' | 'none' | 'local';

/** The error-level log line for a server that asks for a token while none is live, at most this often. */
const NO_TOKEN_LOG_MS = 60_000;
const LOCAL = adminPrincipal('local');

/** Authentication: `Authorization: Bearer <token>`, by the rules of its mode. */
export class Auth {
  readonly #tokens: ApiTokens;
  readonly #adminHash: Buffer | null;
  readonly #log: Logger;
  #mode: AuthMode;
  #loggedNoToken = 0;

  constructor(tokens: ApiTokens, adminToken: string | undefined, mode: AuthMode, log: Logger) {
    this.#tokens = tokens;
    this.#adminHash = adminToken ? hashToken(adminToken) : null;
    this.#mode = mode;
    this.#log = log;
  }

  get mode(): AuthMode {
    return this.#mode;
  }

  /** True when callers must show a token (in `local` mode: once a token exists). */
  async required(): Promise<boolean> {
    if (this.#mode === 'local' && (await this.#tokens.anyLive())) {
      this.#mode = 'token';
      this.#log.info({}, 'tusk http: a token exists now: every request must show one from now on');
    }
    return this.#mode === 'token';
  }

  /**
   * True when this server asks for a token and none would pass: no admin token and none
   * live in the database. Logged at error level (at most once a minute): every request is
   * being refused.
   */
  async locked(): Promise<boolean> {
    if (this.#mode !== 'token' || this.#adminHash !== null || (await this.#tokens.anyLive())) return false;
    if (Date.now() - this.#loggedNoToken >= NO_TOKEN_LOG_MS) {
      this.#loggedNoToken = Date.now();
      this.#log.error(
        {},
        'tusk http: no API token is live (no admin token, every token revoked or none created): every request is refused until one is created (tusk tokens create)',
      );
    }
    return true;
  }

  /** Middleware checking the caller against `access`; leaves `principal` on the context. */
  check(access: Access): MiddlewareHandler<AppEnv> {
    return async (c, next) => {
      if (access !== 'public') {
        const principal = await this.#principal(c);
        if (access !== 'token' && !principal.scopes.has('admin') && !principal.scopes.has(access)) {
          throw new HttpError(
            403,
            'forbidden',
            access === 'admin'
              ? 'this needs an admin token (a tenant token sees its own jobs only)'
              : `this needs a token with the scope ${access} (this one has ${formatScopes(principal.scopes)})`,
          );
        }
        c.set('principal', principal);
      }
      await next();
    };
  }

  async #principal(c: Context): Promise<Principal> {
    if (this.#mode === 'none' || !(await this.required())) return LOCAL;
    const header = c.req.header('authorization') ?? '';
    const token = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
    const principal = token ? await this.#verify(token) : null;
    if (principal) return principal;
    if (await this.locked()) {
      throw new HttpError(
        503,
        'no_token',
        'this server asks for a token and none is live: every request is refused until one is created (tusk tokens create)',
      );
    }
    if (!token) {
      c.header('WWW-Authenticate', 'Bearer');
      throw new HttpError(401, 'unauthorized', 'a token is required: send the header Authorization: Bearer <token>');
    }
    c.header('WWW-Authenticate', 'Bearer error="invalid_token"');
    throw new HttpError(401, 'unauthorized', 'unknown or revoked token');
  }

  async #verify(token: string): Promise<Principal | null> {
    if (this.#adminHash && timingSafeEqual(hashToken(token), this.#adminHash)) return adminPrincipal('admin token');
    return this.#tokens.verify(token);
  }
}

/**
 * The tenant a request may act on: a tenant token's own (asking for another is refused),
 * or for a token of every tenant, the one asked for (undefined: any).
 */
export function scopedTenant(principal: Principal, asked: string | undefined, field = 'tenant'): string | undefined {
  if (principal.tenant === null) return asked;
  if (asked !== undefined && asked !== principal.tenant) {
    throw new HttpError(403, 'forbidden', `this token acts for tenant ${JSON.stringify(principal.tenant)} only`, field);
  }
  return principal.tenant;
}

/** True when the principal may see a job of `tenant`. */
export const sees = (principal: Principal, tenant: string): boolean =>
  principal.tenant === null || principal.tenant === tenant;

/** `admin`, `tenant` (a token of one tenant) or `scoped` (a token of every tenant, without admin). */
export const roleOf = (p: Principal): 'admin' | 'tenant' | 'scoped' =>
  p.scopes.has('admin') ? 'admin' : p.tenant === null ? 'scoped' : 'tenant';
