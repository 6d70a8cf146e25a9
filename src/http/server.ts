import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { Hono } from 'hono';
import { z } from 'zod';
import { SQLSTATE, TuskError, TuskSchemaError, TuskValidationError } from '../errors.js';
import { type MetricsOptions, TuskMetrics } from '../metrics/metrics.js';
import type { Tusk } from '../tusk.js';
import { describe, flagSchema, integer, parse, stringSchema } from '../validation/validate.js';
import { createApp } from './app.js';
import { Auth, type AuthMode } from './auth.js';
import type { AppEnv } from './env.js';
import { isLoopback } from './guard.js';
import { DEFAULT_POOLS, ServerPools } from './pools.js';
import { DEFAULT_RATE_LIMIT, type RateLimit } from './rateLimit.js';
import { requestBounds } from './requestTimeouts.js';
import { ApiTokens } from './tokens.js';

/** Options of `createServer(tusk, options)`. */
export interface ServerOptions {
  /**
   * `'token'`: every caller shows a token (refused while none is live). `'none'`: no
   * auth, every caller is admin, loopback Host names only (never listens elsewhere).
   * Default: `'token'` if there is an admin token or a live token at start; with neither,
   * the server listens on loopback without auth until a token is created, and `app`
   * refuses to be mounted.
   */
  auth?: 'token' | 'none';
  /** A token that is admin, besides the tokens in the database. Default `TUSK_ADMIN_TOKEN`. At least 32 characters off loopback. */
  adminToken?: string;
  /** Serve the dashboard at `/`. Default true. */
  dashboard?: boolean;
  /** `/metrics` settings, or false for no `/metrics`. */
  metrics?: MetricsOptions | false;
  /** Largest request body in bytes. Default twice `maxPayloadBytes` and 64 KiB (2 MiB + 64 KiB). */
  maxBodyBytes?: number;
  /** Largest enqueue-many body (`POST /api/jobs` with `{ jobs: [...] }`). Default 4 MiB (at least `maxBodyBytes`). */
  maxBatchBodyBytes?: number;
  /** Requests per token, or false for no limit. Default `{ perSecond: 200, burst: 1000 }`. */
  rateLimit?: Partial<RateLimit> | false;
  /** Statement timeout of lists and searches, in ms. Default 5 000. */
  readTimeoutMs?: number;
  /** Connections of the server's own pools: lists and searches, and leases. Default `{ reads: 3, leases: 2 }`. */
  connections?: { reads?: number; leases?: number };
  /**
   * Longest a client of `listen` may take to send a request's headers, in ms: past it the
   * server answers 408 and closes the connection. Default 10 000 (at most `requestTimeoutMs`).
   */
  headersTimeoutMs?: number;
  /**
   * Longest a client of `listen` may take to send a whole request, headers and body, in ms:
   * past it the server answers 408 and closes the connection. The answer is not bounded by
   * it: long polls and event streams go on. Default 30 000.
   */
  requestTimeoutMs?: number;
}

/** A running server. */
export interface Listening {
  /** `http://host:port`. */
  url: string;
  port: number;
  /** Stops listening and closes the server's own pools. */
  close(): Promise<void>;
}

/** Tusk's HTTP server: the Hono app, and a way to listen on a port. */
export interface TuskServer {
  /**
   * The Hono app: mount it (`app.route('/tusk', server.app)`) or call
   * `server.app.fetch(request)`. Throws a TuskError when the server has no auth configured
   * (say `auth: 'none'` to mount it without), or an admin token under 32 characters.
   */
  readonly app: Hono<AppEnv>;
  /** The API tokens kept in the database. */
  tokens: ApiTokens;
  /**
   * Listens on `host` (default 127.0.0.1) and `port` (default 8080; 0 for any free one).
   * Anything but loopback needs auth (`auth: 'token'`, an admin token of 32 characters or
   * more, or a live token).
   */
  listen(options?: { port?: number; host?: string }): Promise<Listening>;
  /** Closes the server's own pools (a mounted app's; `Listening.close` does it too). */
  close(): Promise<void>;
}

/** Shortest admin token accepted off loopback and in a mounted app. */
export const MIN_ADMIN_TOKEN_LENGTH = 32;
const MIN_BATCH_BODY_BYTES = 4 * 1024 * 1024;

const optionsSchema = z.strictObject({
  auth: z
    .enum(['token', 'none'], { error: (issue) => `must be 'token' or 'none' (got ${describe(issue.input)})` })
    .optional(),
  adminToken: stringSchema().optional(),
  dashboard: flagSchema().optional(),
  metrics: z
    .union(
      [
        z.literal(false),
        z.strictObject({
          lagMs: integer(0, 3_600_000).optional(),
          maxLabelSets: integer(1, 1_000_000).optional(),
          staleAfterMs: integer(1, 366 * 24 * 3_600_000).optional(),
        }),
      ],
      { error: (issue) => `must be { lagMs?, maxLabelSets?, staleAfterMs? } or false (got ${describe(issue.input)})` },
    )
    .optional(),
  maxBodyBytes: integer(1, 1024 ** 3).optional(),
  maxBatchBodyBytes: integer(1, 1024 ** 3).optional(),
  rateLimit: z
    .union(
      [
        z.literal(false),
        z.strictObject({
          perSecond: z.number().positive().max(1_000_000).optional(),
          burst: integer(1, 1_000_000).optional(),
        }),
      ],
      { error: (issue) => `must be { perSecond?, burst? } or false (got ${describe(issue.input)})` },
    )
    .optional(),
  readTimeoutMs: integer(1, 3_600_000).optional(),
  connections: z.strictObject({ reads: integer(1, 100).optional(), leases: integer(1, 100).optional() }).optional(),
  headersTimeoutMs: integer(1, 3_600_000).optional(),
  requestTimeoutMs: integer(1, 3_600_000).optional(),
});
const listenSchema = z.strictObject({
  port: integer(0, 65535).optional(),
  host: stringSchema().min(1).optional(),
});

/** The server the package's `createServer` (src/index.ts) returns, this module loaded on its first call. */
export async function createServer(tusk: Tusk, given: ServerOptions = {}): Promise<TuskServer> {
  const options = parse(optionsSchema, given, 'server options') as ServerOptions;
  const log = tusk.logger;
  const adminToken = options.adminToken ?? (process.env.TUSK_ADMIN_TOKEN || undefined);
  if (options.auth === 'none' && adminToken !== undefined) {
    throw new TuskValidationError(
      'server options.auth',
      `'none' with an admin token (${options.adminToken === undefined ? 'TUSK_ADMIN_TOKEN' : 'adminToken'}): say which`,
    );
  }
  const db = () => tusk.pool();
  const tokens = new ApiTokens(db, tusk.schema);
  const mode: AuthMode = options.auth ?? (adminToken !== undefined || (await anyLive(tokens)) ? 'token' : 'local');
  const auth = new Auth(tokens, adminToken, mode, log);
  const pools = new ServerPools(tusk, {
    reads: options.connections?.reads ?? DEFAULT_POOLS.reads,
    leases: options.connections?.leases ?? DEFAULT_POOLS.leases,
    readTimeoutMs: options.readTimeoutMs ?? DEFAULT_POOLS.readTimeoutMs,
  });
  const metrics = options.metrics === false ? null : new TuskMetrics(db, tusk.schema, options.metrics);
  const maxBytes = options.maxBodyBytes ?? 2 * tusk.maxPayloadBytes + 64 * 1024;
  const { headers: headersTimeout, request: requestTimeout } = requestBounds(options);
  if (headersTimeout > requestTimeout) {
    // Node refuses it too: the headers are part of the request
    throw new TuskValidationError(
      'server options.headersTimeoutMs',
      `must be at most requestTimeoutMs (${requestTimeout}) (got ${headersTimeout})`,
    );
  }
  const app = createApp({ tusk, db, pools, schema: tusk.schema, tokens, auth, metrics }, log, {
    dashboard: options.dashboard ?? true,
    limits: { maxBytes, maxBatchBytes: Math.max(options.maxBatchBodyBytes ?? MIN_BATCH_BODY_BYTES, maxBytes) },
    rateLimit: options.rateLimit === false ? null : { ...DEFAULT_RATE_LIMIT, ...options.rateLimit },
    loopbackOnly: mode !== 'token',
  });

  const shortAdminToken = (where: string) =>
    adminToken !== undefined && adminToken.length < MIN_ADMIN_TOKEN_LENGTH
      ? new TuskError(
          `the admin token (${options.adminToken === undefined ? 'TUSK_ADMIN_TOKEN' : 'adminToken'}) is ${adminToken.length} characters: ${where} it must be at least ${MIN_ADMIN_TOKEN_LENGTH} (make one with \`openssl rand -base64 32\`, or use \`tusk tokens create\`)`,
        )
      : null;

  async function listen(given: { port?: number; host?: string } = {}): Promise<Listening> {
    const { port = 8080, host = '127.0.0.1' } = parse(listenSchema, given, 'listen options');
    const secured = await auth.required();
    if (!isLoopback(host)) {
      if (!secured) {
        throw new TuskError(
          auth.mode === 'none'
            ? `refusing to listen on ${host} with auth: 'none': anyone could use the API. Listen on 127.0.0.1, or give a token`
            : `refusing to listen on ${host} without a token: anyone could use the API. Create one (tusk tokens create) or set TUSK_ADMIN_TOKEN, or listen on 127.0.0.1`,
        );
      }
      const short = shortAdminToken(`to listen on ${host}`);
      if (short) throw short;
    }
    // says so at error level when no token is live: every request will be refused
    await auth.locked();
    const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
      // Node's defaults let a client that sends its body a byte at a time hold a connection
      // for 5 minutes. These bound receiving the request only, not the answer. Node looks
      // for requests past them every connectionsCheckingInterval (default 30 s, longer
      // than the bounds): at most a second here, so that they hold near their value.
      const serverOptions = {
        headersTimeout,
        requestTimeout,
        connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(headersTimeout / 2))),
      };
      const s = serve({ fetch: app.fetch, port, hostname: host, serverOptions }, () => resolve(s));
      s.once('error', reject);
    });
    const address = server.address() as AddressInfo;
    const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
    log.info(
      { url, auth: secured },
      secured
        ? `tusk http: listening on ${url} (dashboard /, API /api, metrics /metrics)`
        : `tusk http: listening on ${url} without auth, loopback only: ${auth.mode === 'none' ? "auth: 'none'" : 'no API token is configured'}`,
    );
    return {
      url,
      port: address.port,
      close: async () => {
        await new Promise<void>((resolve, reject) => {
          server.close((error) => (error ? reject(error) : resolve()));
          (server as { closeAllConnections?: () => void }).closeAllConnections?.();
        });
        await pools.close();
      },
    };
  }

  return {
    get app() {
      if (auth.mode === 'local') {
        throw new TuskError(
          "createServer(…).app: no auth is configured (no adminToken option, TUSK_ADMIN_TOKEN unset, no live token in the database), so whoever reaches the mounted app would be admin. Give adminToken or create a token (tusk tokens create), pass auth: 'token' to ask for one, or pass auth: 'none' to mount it without auth (loopback Host names only)",
        );
      }
      const short = shortAdminToken('in a mounted app');
      if (short) throw short;
      return app;
    },
    tokens,
    listen,
    close: () => pools.close(),
  };
}

/** Whether a token is live; a schema never migrated says so. */
async function anyLive(tokens: ApiTokens): Promise<boolean> {
  try {
    return await tokens.anyLive(0);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === SQLSTATE.undefinedTable || code === SQLSTATE.invalidSchemaName) {
      throw new TuskSchemaError(
        `Tusk's schema is missing or out of date: run \`tusk migrate\` (${(error as Error).message})`,
        { cause: error },
      );
    }
    throw error;
  }
}
