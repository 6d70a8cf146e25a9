import type { Command } from 'commander';
import { tuskFor } from '../context.js';

export function statusCommand(program: Command): void {
  program
    .command('status')
    .description('print a job as JSON (exit code 1 if there is no such job)')
    .argument('<id>', 'job id')
    .action(async (id: string, _options, command: Command) => {
      const tusk = tuskFor(command);
      try {
        const job = await tusk.getJob(id);
        if (!job) {
          console.error(`tusk: no job with id ${id}`);
          process.exitCode = 1;
          return;
        }
        console.log(JSON.stringify(job, null, 2));
      } finally {
        await tusk.close();
      }
    });
}
