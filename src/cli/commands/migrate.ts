import type { Command } from 'commander';
import { tuskFor } from '../context.js';

export function migrateCommand(program: Command): void {
  program
    .command('migrate')
    .description("create or upgrade Tusk's schema (safe to run from many processes at once)")
    .action(async (_options, command: Command) => {
      const tusk = tuskFor(command);
      try {
        const result = await tusk.migrate();
        console.log(
          result.applied.length
            ? `schema "${tusk.schema}" migrated from version ${result.from} to ${result.to} (${result.applied.join(', ')})`
            : `schema "${tusk.schema}" is up to date (version ${result.to})`,
        );
      } finally {
        await tusk.close();
      }
    });
}
