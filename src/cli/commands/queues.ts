import type { Command } from 'commander';
import { withTusk } from '../context.js';

/** `tusk queues pause|resume|paused`. */
export function queuesCommand(program: Command): void {
  const queues = program.command('queues').description('pause and resume queues (for every worker and consumer)');
  for (const paused of [true, false]) {
    queues
      .command(paused ? 'pause' : 'resume')
      .argument('<queue>')
      .description(
        paused
          ? 'stop claims of the queue’s jobs (running jobs go on, enqueues still land in it)'
          : 'claim the queue’s jobs again',
      )
      .action((queue: string, _o, command: Command) =>
        withTusk(command, async (tusk) => {
          const changed = paused ? await tusk.queues.pause(queue) : await tusk.queues.resume(queue);
          console.log(`queue ${queue} ${paused ? 'paused' : 'resumed'}${changed ? '' : ' (it was already)'}`);
        }),
      );
  }
  queues
    .command('paused')
    .description('the paused queues, one a line: name, then when it was paused')
    .action((_o, command: Command) =>
      withTusk(command, async (tusk) => {
        for (const q of await tusk.queues.paused()) console.log(`${q.queue}\t${q.pausedAt.toISOString()}`);
      }),
    );
}
