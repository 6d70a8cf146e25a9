import type { Command } from 'commander';
import { checkSchema } from '../../migrate/migrate.js';
import { intOption, tuskFor } from '../context.js';
import { runUntilSignal, StopSignal } from '../lifecycle.js';

interface Options {
  once?: boolean;
  everyMs?: number;
}

/**
 * `tusk upkeep`: the queue's upkeep with no worker, for deployments whose consumers are
 * not Tusk workers (HTTP or SQL leases): leases that run out come back, delayed jobs
 * become due, old jobs expire, schedules fire, history is kept in shape.
 */
export function upkeepCommand(program: Command): void {
  program
    .command('upkeep')
    .description(
      'run the upkeep workers otherwise do (expired leases back to the queue, delayed jobs due, expiry, ' +
        'schedules, history retention): for consumers that are not Tusk workers; stops on SIGINT/SIGTERM',
    )
    .option('--once', 'one pass, print what it did as JSON, exit')
    .option('--every-ms <ms>', 'period of the upkeep (default 500)', intOption('--every-ms', 1, 600_000))
    .action(async (options: Options, command: Command) => {
      const tusk = tuskFor(command);
      let signal: StopSignal;
      try {
        await checkSchema(await tusk.pool(), tusk.schema);
        const upkeep = tusk.upkeep(options.everyMs === undefined ? {} : { everyMs: options.everyMs });
        if (options.once) {
          console.log(JSON.stringify(await upkeep.runOnce()));
          await tusk.close();
          return;
        }
        signal = new StopSignal();
        upkeep.start();
        console.error(`tusk upkeep: running on schema "${tusk.schema}" every ${options.everyMs ?? 500} ms`);
      } catch (error) {
        await tusk.close();
        throw error;
      }
      await runUntilSignal('the upkeep', () => tusk.close(), signal);
      process.exit();
    });
}
