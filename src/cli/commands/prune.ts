import type { Command } from 'commander';
import { intOption, withTusk } from '../context.js';

export function pruneCommand(program: Command): void {
  program
    .command('prune')
    .description(
      'apply history retention now: drop day partitions older than the longest retention, delete older rows of tenants kept shorter',
    )
    .option('--batch <n>', 'rows deleted per transaction (default 10000)', intOption('--batch', 1))
    .action((options: { batch?: number }, command: Command) =>
      withTusk(command, async (tusk) => {
        const started = Date.now();
        const { dropped, deleted } = await tusk.prune({
          ...(options.batch === undefined ? {} : { batch: options.batch }),
          onProgress: (b) => {
            for (const part of b.dropped) console.log(`dropped ${part}`);
            if (b.deleted > 0)
              console.log(`deleted ${b.deleted.toLocaleString('en')} rows${b.more ? ', more to go' : ''}`);
          },
        });
        console.log(
          `done in ${((Date.now() - started) / 1000).toFixed(1)} s: ${dropped.length} partitions dropped, ` +
            `${deleted.toLocaleString('en')} rows deleted`,
        );
      }),
    );
}
