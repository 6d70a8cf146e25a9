import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { Hono } from 'hono';
import { z } from 'zod';
import { describe, flagSchema, integer, parse, stringSchema } from '../client/validate.js';
import { TuskError } from '../errors.js';
import type { Logger } from '../log.js';
import { type MetricsOptions, TuskMetrics } from '../metrics/metrics.js';
import type { Tusk } from '../tusk.js';
import { createApp } from './app.js';
import { Auth } from './auth.js';
import type { AppEnv } from './env.js';
import { ApiTokens } from './tokens.js';

/** Options of `tusk.server()`. */
export interface ServerOptions {
  /** A token that is admin, besides the tokens in the database. Default `TUSK_ADMIN_TOKEN`. */
  adminToken?: string;
  /** Serve the dashboard at `/`. Default true. */
  dashboard?: boolean;
  /** `/metrics` settings, or false for no `/metrics`. */
  metrics?: MetricsOptions | false;
  /** Largest request body in bytes. Default 32 MiB. */
  maxBodyBytes?: number;
}

/** A running server. */
export interface Listening {
  /** `http://host:port`. */
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Tusk's HTTP server: the Hono app, and a way to listen on a port. */
export interface TuskServer {
  /** The Hono app: mount it (`app.route('/tusk', server.app)`) or call `server.app.fetch(request)`. */
  app: Hono<AppEnv>;
  /** The API tokens kept in the database. */
  tokens: ApiTokens;
  /**
   * Listens on `host` (default 127.0.0.1) and `port` (default 8080; 0 for any free one).
   * Without any token (neither `adminToken` nor one in the database), the server asks
   * none and so refuses any host but loopback.
   */
  listen(options?: { port?: number; host?: string }): Promise<Listening>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

const optionsSchema = z.strictObject({
  adminToken: stringSchema().optional(),
  dashboard: flagSchema().optional(),
  metrics: z
    .union([z.literal(false), z.strictObject({ lagMs: integer(0, 3_600_000).optional() })], {
      error: (issue) => `must be { lagMs? } or false (got ${describe(issue.input)})`,
    })
    .optional(),
  maxBodyBytes: integer(1, 1024 ** 3).optional(),
});
const listenSchema = z.strictObject({
  port: integer(0, 65535).optional(),
  host: stringSchema().min(1).optional(),
});

export function createServer(tusk: Tusk, log: Logger, given: ServerOptions = {}): TuskServer {
  const options = parse(optionsSchema, given, 'server options') as ServerOptions;
  const db = () => tusk.pool();
  const tokens = new ApiTokens(db, tusk.schema);
  const auth = new Auth(tokens, options.adminToken ?? (process.env.TUSK_ADMIN_TOKEN || undefined));
  const metrics = options.metrics === false ? null : new TuskMetrics(db, tusk.schema, options.metrics);
  const app = createApp({ tusk, db, schema: tusk.schema, tokens, auth, metrics }, log, {
    dashboard: options.dashboard ?? true,
    maxBodyBytes: options.maxBodyBytes ?? 32 * 1024 * 1024,
  });

  async function listen(given: { port?: number; host?: string } = {}): Promise<Listening> {
    const { port = 8080, host = '127.0.0.1' } = parse(listenSchema, given, 'listen options');
    const secured = await auth.required();
    if (!secured && !LOOPBACK.has(host)) {
      throw new TuskError(
        `refusing to listen on ${host} without a token: anyone could use the API. Create one (tusk tokens create) or set TUSK_ADMIN_TOKEN, or listen on 127.0.0.1`,
      );
    }
    const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
      const s = serve({ fetch: app.fetch, port, hostname: host }, () => resolve(s));
      s.once('error', reject);
    });
    const address = server.address() as AddressInfo;
    const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
    log.info(
      { url, auth: secured },
      secured
        ? `tusk http: listening on ${url} (dashboard /, API /api, metrics /metrics)`
        : `tusk http: listening on ${url} without auth, loopback only: no API token is configured`,
    );
    return {
      url,
      port: address.port,
      close: () =>
        new Promise<void>((resolve, reject) => {
          server.close((error) => (error ? reject(error) : resolve()));
          (server as { closeAllConnections?: () => void }).closeAllConnections?.();
        }),
    };
  }

  return { app, tokens, listen };
}
