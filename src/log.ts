import { createRequire } from 'node:module';
import type pinoModule from 'pino';
import type * as prettyModule from 'pino-pretty';

/** The logging interface Tusk needs: pino, or anything shaped like it. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * The default logger: pino on stderr at `TUSK_LOG_LEVEL` (default `info`), as readable
 * lines on a terminal and JSON lines otherwise (`TUSK_LOG_FORMAT=pretty` or `json`
 * chooses). Tusk logs lifecycle events at info and never one line per job above debug.
 * pino is loaded only when this default is used (it weighs ~9 MB of memory an app with
 * its own logger need not carry), pino-pretty only on a terminal.
 */
export function createLogger(option: Logger | false | undefined): Logger {
  if (option === false) return silent;
  if (option) return option;
  const require = createRequire(import.meta.url);
  const { pino } = require('pino') as typeof pinoModule;
  const settings = { name: 'tusk', level: process.env.TUSK_LOG_LEVEL ?? 'info' };
  if (logFormat(process.env.TUSK_LOG_FORMAT, process.stderr.isTTY === true) === 'json') {
    return pino(settings, pino.destination(2));
  }
  // pino-pretty as a synchronous stream in this thread rather than as a transport thread:
  // a CLI that exits right after stopping loses no last line
  const pretty = require('pino-pretty') as typeof prettyModule;
  return pino(
    settings,
    pretty.default({
      destination: 2,
      sync: true,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,name',
      singleLine: true,
    }),
  );
}

/** `json` or `pretty`: what TUSK_LOG_FORMAT says, else pretty on a terminal only. */
export function logFormat(setting: string | undefined, terminal: boolean): 'json' | 'pretty' {
  if (setting === 'json' || setting === 'pretty') return setting;
  return terminal ? 'pretty' : 'json';
}
