import { timingSafeEqual } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import type { AppEnv } from './env.js';
import { HttpError } from './errors.js';
import { type ApiTokens, hashToken, type Principal } from './tokens.js';

/** Who may call an endpoint: anyone, any valid token, or an admin token. */
export type Access = 'public' | 'token' | 'admin';

/**
 * Authentication: `Authorization: Bearer <token>`, checked against the admin token given
 * to the server (option or TUSK_ADMIN_TOKEN) and the tokens in the database. While
 * neither exists, every caller is admin: the server then listens on loopback only.
 */
export class Auth {
  readonly #tokens: ApiTokens;
  readonly #adminHash: Buffer | null;

  constructor(tokens: ApiTokens, adminToken: string | undefined) {
    this.#tokens = tokens;
    this.#adminHash = adminToken ? hashToken(adminToken) : null;
  }

  /** True when callers must show a token. */
  async required(): Promise<boolean> {
    return this.#adminHash !== null || (await this.#tokens.anyLive());
  }

  /** Middleware checking the caller against `access`; leaves `principal` on the context. */
  check(access: Access): MiddlewareHandler<AppEnv> {
    return async (c, next) => {
      if (access !== 'public') {
        const principal = await this.#principal(c);
        if (access === 'admin' && principal.role !== 'admin') {
          throw new HttpError(403, 'forbidden', 'this needs an admin token (a tenant token sees its own jobs only)');
        }
        c.set('principal', principal);
      }
      await next();
    };
  }

  async #principal(c: Context): Promise<Principal> {
    if (!(await this.required())) return { role: 'admin' };
    const header = c.req.header('authorization') ?? '';
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match?.[1]) {
      c.header('WWW-Authenticate', 'Bearer');
      throw new HttpError(401, 'unauthorized', 'a token is required: send the header Authorization: Bearer <token>');
    }
    const token = match[1];
    if (this.#adminHash && timingSafeEqual(hashToken(token), this.#adminHash)) return { role: 'admin' };
    const principal = await this.#tokens.verify(token);
    if (!principal) {
      c.header('WWW-Authenticate', 'Bearer error="invalid_token"');
      throw new HttpError(401, 'unauthorized', 'unknown or revoked token');
    }
    return principal;
  }
}

/**
 * The tenant a request may act on: a tenant token's own (asking for another is refused),
 * or for an admin, the one asked for (undefined: any).
 */
export function scopedTenant(principal: Principal, asked: string | undefined, field = 'tenant'): string | undefined {
  if (principal.role === 'admin') return asked;
  if (asked !== undefined && asked !== principal.tenant) {
    throw new HttpError(403, 'forbidden', `this token acts for tenant ${JSON.stringify(principal.tenant)} only`, field);
  }
  return principal.tenant;
}

/** True when the principal may see a job of `tenant`. */
export const sees = (principal: Principal, tenant: string): boolean =>
  principal.role === 'admin' || principal.tenant === tenant;
