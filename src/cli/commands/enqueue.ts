import type { Command } from 'commander';
import { TuskValidationError } from '../../errors.js';
import type { EnqueueOptions } from '../../types.js';
import { intOption, tuskFor } from '../context.js';

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
    .argument('[payload]', 'payload as JSON', 'null')
    .option('--tenant <tenant>', 'tenant the job belongs to')
    .option('--queue <queue>', 'queue name')
    .option('--delay <ms>', 'start no sooner than this many milliseconds from now', intOption('--delay'))
    .option('--priority <n>', 'lower runs first', intOption('--priority', -32768))
    .option('--max-attempts <n>', 'attempts before the job is dead', intOption('--max-attempts', 1))
    .action(async (task: string, payloadText: string, options: Options, command: Command) => {
      let payload: unknown;
      try {
        payload = JSON.parse(payloadText);
      } catch (error) {
        throw new TuskValidationError('payload', `is not valid JSON: ${(error as Error).message}`);
      }
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
