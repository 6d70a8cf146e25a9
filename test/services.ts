// What some tests need besides PostgreSQL: Chromium (the dashboard's browser test), Redis
// (the BullMQ sink), root (the embedded server as root). Where one is missing its tests
// are skipped with the reason, listed at the end of the run (test/setup/skips.ts); with
// CI=true they fail instead, so that CI runs every test.
import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { beforeEach } from 'vitest';

/** A service some tests need: whether it is here, and if not, why and how to get it. */
export interface Service {
  available: boolean;
  /** Why its tests are skipped when it is missing. */
  reason: string;
}

const inCI = ['true', '1'].includes(process.env.CI ?? '');

/**
 * Makes the tests of the enclosing file or describe block need `service`: skipped with
 * its reason where it is missing, failed under CI=true. Guard beforeAll hooks that use
 * the service with `service.available`.
 */
export function needs(service: Service): Service {
  beforeEach((ctx) => {
    if (service.available) return;
    if (inCI) throw new Error(`${service.reason}; CI=true runs every test`);
    ctx.skip(service.reason);
  });
  return service;
}

/** Chromium at CHROMIUM_PATH, default /usr/bin/chromium (Debian's). */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const chromiumPresent = (): Service => ({
  available: existsSync(CHROMIUM),
  reason: `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`,
});

/** The Redis of the BullMQ tests: REDIS_URL, default redis://127.0.0.1:6379 (database 0). */
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export async function redisPresent(): Promise<Service> {
  const client = new Redis(REDIS_URL, {
    lazyConnect: true,
    connectTimeout: 3000,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  let lastError: Error | null = null;
  client.on('error', (error: Error) => {
    lastError = error;
  });
  try {
    await client.connect();
    await client.ping();
    return { available: true, reason: '' };
  } catch (error) {
    return {
      available: false,
      reason: `no Redis at ${REDIS_URL} (${(lastError ?? (error as Error)).message}; start redis-server, or set REDIS_URL)`,
    };
  } finally {
    client.disconnect();
  }
}

/** Running as root (CI does): the embedded server's root path. */
export const runningAsRoot = (): Service => ({
  available: process.getuid?.() === 0,
  reason: 'not running as root (the embedded PostgreSQL as root: CI runs as root)',
});
