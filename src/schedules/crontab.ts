import { TuskValidationError } from '../errors.js';
import type { ScheduleOptions } from './options.js';

/** One line of a crontab file. */
export interface CrontabEntry {
  name: string;
  cron: string;
  options: ScheduleOptions;
}

/** The fields a 6th token may be (weekday of a 6-field expression), not a schedule name. */
const CRON_FIELD = /^(?:[\d*?LW#,/-]|sun|mon|tue|wed|thu|fri|sat)+$/i;
const INTEGER_KEYS = new Set(['backfill', 'priority', 'maxAttempts']);
const STRING_KEYS = new Set(['task', 'tenant', 'queue', 'tz', 'concurrencyKey']);

/**
 * Parses a crontab file: one schedule a line,
 *
 *     <cron: 5 fields, 6 with seconds, or @daily...> <name> [key=value ...] [JSON payload]
 *
 * keys: task (default: the name), tenant, queue, tz, backfill, priority, maxAttempts,
 * concurrencyKey. `#` starts a comment line. Errors name the file and line.
 *
 * @example
 * parseCrontab('0 3 * * * nightly-report tenant=acme tz=Europe/Paris {"kind": "daily"}', 'tusk.crontab');
 */
export function parseCrontab(text: string, file: string): CrontabEntry[] {
  const entries: CrontabEntry[] = [];
  const seen = new Set<string>();
  for (const [i, raw] of text.split(/\r?\n/).entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const where = `${file}:${i + 1}`;
    const fail = (message: string): never => {
      throw new TuskValidationError(where, message);
    };
    const payloadAt = line.search(/\s[{["]/);
    // trimmed: a payload aligned in a column has more than one space before it
    const head = (payloadAt < 0 ? line : line.slice(0, payloadAt).trimEnd()).split(/\s+/);
    const cronFields = head[0]?.startsWith('@') ? 1 : head.length > 6 && CRON_FIELD.test(head[5] ?? '') ? 6 : 5;
    if (head.length <= cronFields) fail('expected <cron expression> <name> [key=value ...] [JSON payload]');
    const name = head[cronFields] as string;
    if (seen.has(name)) fail(`schedule ${JSON.stringify(name)} is defined twice`);
    seen.add(name);
    const options: Record<string, unknown> = {};
    for (const pair of head.slice(cronFields + 1)) {
      const eq = pair.indexOf('=');
      const key = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      if (eq <= 0 || !(INTEGER_KEYS.has(key) || STRING_KEYS.has(key))) {
        fail(`unknown option ${JSON.stringify(pair)} (keys: ${[...STRING_KEYS, ...INTEGER_KEYS].join(', ')})`);
      }
      options[key] = INTEGER_KEYS.has(key) ? Number(value) : value;
    }
    if (payloadAt >= 0) {
      try {
        options.payload = JSON.parse(line.slice(payloadAt));
      } catch (error) {
        fail(`the payload is not valid JSON: ${(error as Error).message}`);
      }
    }
    entries.push({ name, cron: head.slice(0, cronFields).join(' '), options: options as ScheduleOptions });
  }
  return entries;
}
