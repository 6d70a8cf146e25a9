import { type Command, Option } from 'commander';
import { TuskValidationError } from '../../errors.js';
import type { EnqueueOptions } from '../../types.js';
import { calendarValid } from '../../validation/dates.js';
import { MAX_DELAY_MS } from '../../validation/validate.js';
import { intOption, optionError, tuskFor } from '../context.js';
import { jsonArgument } from '../payload.js';

interface Options {
  tenant?: string;
  queue?: string;
  delayMs?: number;
  delay?: number;
  runAt?: Date;
  priority?: number;
  maxAttempts?: number;
  expiresAt?: Date;
  concurrencyKey?: string;
  dedupe?: boolean;
  dedupKey?: string;
  dedupWindowMs?: number;
  debounceKey?: string;
  debounceMs?: number;
  debounceMaxWaitMs?: number;
  source?: EnqueueOptions['source'];
  dependsOn?: string[];
  onDependencyFailure?: 'cancel' | 'continue';
}

/** An ISO 8601 time with its date and time (`2026-05-01T09:00:00Z`), as a Date. */
export function timeOption(flag: string) {
  return (value: string): Date => {
    const at = new Date(value);
    if (!calendarValid(value) || Number.isNaN(at.getTime())) {
      throw optionError(flag, `must be an ISO 8601 time such as 2026-05-01T09:00:00Z (got ${JSON.stringify(value)})`);
    }
    return at;
  };
}

/** `order:42` → { type: 'order', id: '42' }; a JSON object for one with a method. */
export function sourceOption(value: string): EnqueueOptions['source'] {
  if (value.startsWith('{')) {
    try {
      return JSON.parse(value) as EnqueueOptions['source'];
    } catch (error) {
      throw optionError('--source', `is not valid JSON: ${(error as Error).message}`);
    }
  }
  const at = value.indexOf(':');
  if (at < 1 || at === value.length - 1) {
    throw optionError(
      '--source',
      `takes type:id (order:42) or JSON ({"type":"order","id":"42","method":"ship"}) (got ${JSON.stringify(value)})`,
    );
  }
  return { type: value.slice(0, at), id: value.slice(at + 1) };
}

/** The API's refusal of `options.dedupKey` as one of `--dedup-key`. */
function asFlagError(error: unknown): unknown {
  if (!(error instanceof TuskValidationError) || !error.field.startsWith('options.')) return error;
  const [name = '', ...path] = error.field.slice('options.'.length).split('.');
  const flag = `--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  return new TuskValidationError(
    [flag, ...path].join('.'),
    error.issues[0]?.message ?? error.message,
    error.issues.map((issue) => ({ ...issue, path: issue.path.replace(`options.${name}`, flag) })),
  );
}

/** The options of `tusk enqueue`: the API's EnqueueOptions, in kebab case. */
export function enqueueCommand(program: Command): void {
  program
    .command('enqueue')
    .description("add a job and print its id (deduplicated: the existing job's id, said on standard error)")
    .argument('<task>', 'task name')
    .argument('[payload]', "payload as JSON; '-' reads it from standard input", 'null')
    .option('--tenant <tenant>', "tenant the job belongs to (default: the task's, else 'default')")
    .option('--queue <queue>', "queue name (default: the task's, else 'default')")
    .option('--priority <n>', 'lower runs first (default 0)', intOption('--priority', -32768, 32767))
    .option('--run-at <time>', 'do not start before this ISO 8601 time', timeOption('--run-at'))
    .option(
      '--delay-ms <ms>',
      'do not start before this many milliseconds from now',
      intOption('--delay-ms', 0, MAX_DELAY_MS),
    )
    // the name before --delay-ms, kept working
    .addOption(new Option('--delay <ms>').argParser(intOption('--delay', 0, MAX_DELAY_MS)).hideHelp())
    .option(
      '--max-attempts <n>',
      "attempts before the job is dead (default: the task's, else 5)",
      intOption('--max-attempts', 1, 1000),
    )
    .option('--expires-at <time>', 'if not started by this ISO 8601 time, it ends expired', timeOption('--expires-at'))
    .option('--concurrency-key <key>', 'limits running jobs per key in the tenant (tusk tenants set --per-key)')
    .option('--dedupe', 'while an unfinished job of this task and payload exists, return its id instead')
    .option('--dedup-key <key>', 'while an unfinished job of this tenant with this key exists, return its id instead')
    .option(
      '--dedup-window-ms <ms>',
      'how long a job counts for deduplication (default 600000)',
      intOption('--dedup-window-ms', 0, MAX_DELAY_MS),
    )
    .option(
      '--debounce-key <key>',
      'debounce: enqueues with this key while its job waits make one job (with --debounce-ms)',
    )
    .option(
      '--debounce-ms <ms>',
      'debounce: start this long after the last enqueue',
      intOption('--debounce-ms', 1, MAX_DELAY_MS),
    )
    .option(
      '--debounce-max-wait-ms <ms>',
      'debounce: start at most this long after the first enqueue',
      intOption('--debounce-max-wait-ms', 1, MAX_DELAY_MS),
    )
    .option('--source <type:id>', 'the record the job is about: type:id, or JSON with a method', sourceOption)
    .option(
      '--depends-on <ids>',
      'job ids, comma-separated: it waits until they have ended, and runs if they all succeeded',
      (value: string) => value.split(',').map((id) => id.trim()),
    )
    .addOption(
      new Option('--on-dependency-failure <what>', 'when one of them ends dead, cancelled or expired').choices([
        'cancel',
        'continue',
      ]),
    )
    .action(async (task: string, payloadText: string, options: Options, command: Command) => {
      const payload = await jsonArgument(payloadText, 'payload');
      const { delay, debounceKey, debounceMs, debounceMaxWaitMs, ...rest } = options;
      const opts: EnqueueOptions = { ...rest };
      if (debounceKey !== undefined || debounceMs !== undefined || debounceMaxWaitMs !== undefined) {
        if (debounceKey === undefined || debounceMs === undefined) {
          throw optionError('--debounce-key', 'and --debounce-ms go together (--debounce-max-wait-ms with them)');
        }
        opts.debounce = {
          key: debounceKey,
          delayMs: debounceMs,
          ...(debounceMaxWaitMs === undefined ? {} : { maxWaitMs: debounceMaxWaitMs }),
        };
      }
      if (delay !== undefined && opts.delayMs !== undefined) {
        throw optionError('--delay', 'is the older name of --delay-ms: give one of them');
      }
      if (delay !== undefined) opts.delayMs = delay;
      const tusk = tuskFor(command);
      try {
        const { id, deduplicated } = await tusk.enqueue(task, payload, opts);
        console.log(id);
        if (deduplicated && opts.debounce) {
          console.error(`tusk: debounced: the key's waiting job (${id}) takes this payload and starts later`);
        } else if (deduplicated) {
          console.error(`tusk: deduplicated: an unfinished job with that key exists (${id}), no job added`);
        }
      } catch (error) {
        throw asFlagError(error);
      } finally {
        await tusk.close();
      }
    });
}
