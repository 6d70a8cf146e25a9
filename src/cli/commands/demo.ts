import type { Command } from 'commander';
import { runDemo } from '../../demo/demo.js';
import type { GlobalOptions } from '../context.js';
import { intOption, urlSource } from '../context.js';

export function demoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'run the demo: a few thousand jobs for several tenants, live progress, a summary (embedded PostgreSQL unless a URL is given), ' +
        'in schema tusk_demo or --schema, dropped and made again at each run (one the demo did not make is refused)',
    )
    .option('--jobs <n>', 'jobs to enqueue (default 3000)', intOption('--jobs', 1))
    .option('--quick', 'a short run (400 shorter jobs), for CI')
    .action(async (options: { jobs?: number; quick?: boolean }, command: Command) => {
      const globals = command.optsWithGlobals<GlobalOptions>();
      const { url } = urlSource(command);
      await runDemo({
        ...(url ? { connectionString: url } : {}),
        ...(globals.schema ? { schema: globals.schema } : {}),
        ...(options.jobs ? { jobs: options.jobs } : {}),
        quick: options.quick ?? false,
      });
    });
}
