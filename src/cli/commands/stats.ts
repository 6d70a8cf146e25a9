import type { Command } from 'commander';
import type { GroupStats } from '../../client/stats.js';
import { intOption, tuskFor } from '../context.js';
import { renderTable } from '../table.js';

const row = (name: string, g: GroupStats) => [
  name,
  g.counts.running,
  g.counts.available,
  g.counts.scheduled,
  g.counts.failed,
  g.counts.succeeded,
  g.counts.dead,
  g.counts.cancelled,
  g.counts.expired,
  g.oldestWaitingMs === null ? null : Math.round(g.oldestWaitingMs),
];
const headers = (first: string) => [
  first,
  'running',
  'waiting',
  'scheduled',
  'retrying',
  'succeeded',
  'dead',
  'cancelled',
  'expired',
  'oldest wait ms',
];

export function statsCommand(program: Command): void {
  program
    .command('stats')
    .description('jobs by state per tenant and per queue (finished ones over a window), oldest waiting job')
    .option('--window-ms <ms>', 'count finished jobs over this window (default 3600000)', intOption('--window-ms'))
    .option('--json', 'print JSON')
    .action(async (options: { windowMs?: number; json?: boolean }, command: Command) => {
      const tusk = tuskFor(command);
      try {
        const stats = await tusk.stats(options.windowMs === undefined ? {} : { windowMs: options.windowMs });
        if (options.json) {
          console.log(JSON.stringify(stats, null, 2));
          return;
        }
        console.log(`finished jobs since ${stats.since.toISOString()}\n`);
        console.log(
          renderTable(
            headers('tenant'),
            stats.tenants.map((t) => row(t.tenant, t)),
          ),
        );
        console.log();
        console.log(
          renderTable(headers('queue'), [...stats.queues.map((q) => row(q.queue, q)), row('(all)', stats.total)]),
        );
      } finally {
        await tusk.close();
      }
    });
}
