import { createRequire } from 'node:module';
import type pinoModule from 'pino';

/** The logging interface Tusk needs: pino, or anything shaped like it. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * The default logger: pino on stderr at `TUSK_LOG_LEVEL` (default `info`). Tusk logs
 * lifecycle events at info and never one line per job above debug. pino is loaded only
 * when this default is used (it weighs ~9 MB of memory an app with its own logger need not carry).
 */
export function createLogger(option: Logger | false | undefined): Logger {
  if (option === false) return silent;
  if (option) return option;
  const { pino } = createRequire(import.meta.url)('pino') as typeof pinoModule;
  return pino({ name: 'tusk', level: process.env.TUSK_LOG_LEVEL ?? 'info' }, pino.destination(2));
}
