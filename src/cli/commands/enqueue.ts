import type { Command } from 'commander';
import { MAX_DELAY_MS } from '../../client/validate.js';
import type { EnqueueOptions } from '../../types.js';
import { intOption, tuskFor } from '../context.js';
import { jsonArgument } from '../payload.js';

interface Options {
  tenant?: string;
  queue?: string;
  delay?: number;
  priority?: number;
  maxAttempts?: number;
}

export function enqueueCommand(program: Command): void {
  program
    .command('enqueue')
    .description('add a job and print its id')
    .argument('<task>', 'task name')
    .argument('[payload]', "payload as JSON; '-' reads it from standard input", 'null')
    .option('--tenant <tenant>', 'tenant the job belongs to')
    .option('--queue <queue>', 'queue name')
    .option(
      '--delay <ms>',
      'start no sooner than this many milliseconds from now',
      intOption('--delay', 0, MAX_DELAY_MS),
    )
    .option('--priority <n>', 'lower runs first', intOption('--priority', -32768, 32767))
    .option('--max-attempts <n>', 'attempts before the job is dead', intOption('--max-attempts', 1, 1000))
    .action(async (task: string, payloadText: string, options: Options, command: Command) => {
      const payload = await jsonArgument(payloadText, 'payload');
      const tusk = tuskFor(command);
      try {
        const opts: EnqueueOptions = {};
        if (options.tenant !== undefined) opts.tenant = options.tenant;
        if (options.queue !== undefined) opts.queue = options.queue;
        if (options.delay !== undefined) opts.delayMs = options.delay;
        if (options.priority !== undefined) opts.priority = options.priority;
        if (options.maxAttempts !== undefined) opts.maxAttempts = options.maxAttempts;
        const { id } = await tusk.enqueue(task, payload, opts);
        console.log(id);
      } finally {
        await tusk.close();
      }
    });
}
