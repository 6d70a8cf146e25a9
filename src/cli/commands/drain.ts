import type { Command } from 'commander';
import { bullmqSink, bullmqSinkReady } from '../../drain/bullmq.js';
import type { Drainer, DrainerOptions } from '../../drain/drainer.js';
import { intOption, optionError, tuskFor, urlSource } from '../context.js';
import { runUntilSignal, StopSignal, startPatiently } from '../lifecycle.js';

interface Options {
  sink: 'tusk' | 'bullmq';
  redisUrl: string;
  bullmqQueue?: string;
  bullmqPrefix?: string;
  idempotent?: boolean;
  batchSize?: number;
  standbyPollMs?: number;
  sendTimeoutMs?: number;
  progressMs: number;
}

const sinkOption = (value: string): Options['sink'] => {
  if (value !== 'tusk' && value !== 'bullmq')
    throw optionError('--sink', `must be 'tusk' or 'bullmq' (got ${JSON.stringify(value)})`);
  return value;
};

export function drainCommand(program: Command): void {
  program
    .command('drain')
    .description(
      'forward staged jobs (tusk.stage) to a sink, in batches; one drainer per schema is active, ' +
        'others stand by to take over (stops gracefully on SIGINT/SIGTERM)',
    )
    .requiredOption('--sink <tusk|bullmq>', "where staged jobs go: 'tusk' (this queue) or 'bullmq' (Redis)", sinkOption)
    .option('--redis-url <url>', 'Redis of the bullmq sink', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
    .option('--bullmq-queue <name>', "BullMQ queue of every job (default: the job's Tusk queue)")
    .option('--bullmq-prefix <prefix>', "BullMQ's key prefix (default bull)")
    .option(
      '--idempotent',
      "BullMQ job id staged-<key> (the schema's key space and the staged id): a batch sent twice after a crash adds no duplicate",
    )
    .option('--batch-size <n>', 'jobs per batch (default 1000)', intOption('--batch-size', 1))
    .option(
      '--standby-poll-ms <ms>',
      'how often a standing-by drainer tries to take over (default 1000)',
      intOption('--standby-poll-ms', 10),
    )
    .option(
      '--send-timeout-ms <ms>',
      'how long a send may take before it is given up; a drainer taking over waits that long (default 10000)',
      intOption('--send-timeout-ms', 100, 3_600_000),
    )
    .option(
      '--progress-ms <ms>',
      'how often to print the forwarding rate (0: never)',
      intOption('--progress-ms'),
      10_000,
    )
    .action(async (options: Options, command: Command) => {
      // refused at start, not logged at each batch while the drainer runs on
      if (options.sink === 'bullmq') await bullmqSinkReady();
      const signal = new StopSignal();
      const tusk = tuskFor(command);
      const drainerOptions: DrainerOptions = {
        sink:
          options.sink === 'tusk'
            ? 'tusk'
            : bullmqSink({
                connection: options.redisUrl,
                ...(options.bullmqQueue ? { queue: options.bullmqQueue } : {}),
                ...(options.bullmqPrefix ? { prefix: options.bullmqPrefix } : {}),
                idempotent: options.idempotent === true,
              }),
      };
      if (options.batchSize !== undefined) drainerOptions.batchSize = options.batchSize;
      if (options.standbyPollMs !== undefined) drainerOptions.standbyPollMs = options.standbyPollMs;
      if (options.sendTimeoutMs !== undefined) drainerOptions.sendTimeoutMs = options.sendTimeoutMs;
      let started: Drainer | null;
      try {
        started = await startPatiently(() => tusk.drainer(drainerOptions), 'the drainer', urlSource(command), signal);
      } catch (error) {
        await tusk.close();
        throw error;
      }
      if (!started) {
        await tusk.close(); // a signal while the database was out of reach
        process.exit();
      }
      const drainer = started;
      // a long-lived Tusk process: it takes part in the queue's upkeep
      tusk.upkeep().start();
      let last = { at: Date.now(), forwarded: 0 };
      const progress =
        options.progressMs > 0
          ? setInterval(() => {
              const now = { at: Date.now(), forwarded: drainer.forwarded };
              const n = now.forwarded - last.forwarded;
              if (n > 0) {
                const rate = Math.round((n * 1000) / (now.at - last.at));
                console.error(`tusk drain: forwarded ${n} jobs (${rate}/s), ${now.forwarded} since start`);
              }
              last = now;
            }, options.progressMs)
          : null;
      await runUntilSignal(
        'the drainer',
        async () => {
          if (progress) clearInterval(progress);
          await tusk.close();
          console.error(`tusk drain: stopped after forwarding ${drainer.forwarded} jobs`);
        },
        signal,
      );
      process.exit();
    });
}
