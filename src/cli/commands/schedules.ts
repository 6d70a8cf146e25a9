import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { ScheduleInfo } from '../../client/schedules.js';
import { type CrontabEntry, parseCrontab } from '../../schedules/crontab.js';
import type { ScheduleOptions } from '../../schedules/options.js';
import type { Tusk } from '../../tusk.js';
import { intOption, withTusk } from '../context.js';
import { jsonArgument } from '../payload.js';
import { renderTable } from '../table.js';

const time = (d: Date | null) => (d ? d.toISOString() : null);

export function scheduleTable(schedules: ScheduleInfo[]): string {
  return renderTable(
    [
      'name',
      'cron',
      'tz',
      'task',
      'tenant',
      'queue',
      'backfill',
      'source',
      'next run',
      'last run',
      'last job',
      'paused',
    ],
    schedules.map((s) => [
      s.name,
      s.cron,
      s.tz,
      s.task,
      s.tenant,
      s.queue,
      s.backfill,
      s.source,
      time(s.nextRunAt),
      time(s.lastRunAt),
      s.lastJobId,
      time(s.pausedAt),
    ]),
  );
}

/** The entries of a crontab file, checked (a mistake throws, naming the file and line). */
export async function readCrontabFile(file: string): Promise<CrontabEntry[]> {
  return parseCrontab(await readFile(file, 'utf8'), file);
}

/**
 * Sets the schedules of a crontab file (removing those an earlier file set); prints what
 * changed. `entries`: the file's, read before.
 */
export async function syncCrontabFile(tusk: Tusk, file: string, entries?: CrontabEntry[]): Promise<void> {
  const { set, removed } = await tusk.schedules.syncCrontab(entries ?? (await readCrontabFile(file)));
  console.error(
    `tusk: ${file}: ${set.length} schedule${set.length === 1 ? '' : 's'} set` +
      (removed.length > 0 ? `, removed ${removed.join(', ')}` : ''),
  );
}

interface SetOptions {
  task?: string;
  payload?: string;
  tenant?: string;
  queue?: string;
  tz?: string;
  backfill?: number;
  priority?: number;
  maxAttempts?: number;
}

export function schedulesCommand(program: Command): void {
  const schedules = program.command('schedules').description('recurring jobs (cron expressions)');
  schedules
    .command('list')
    .description('every schedule with its next and last tick')
    .option('--json', 'print JSON')
    .action((options: { json?: boolean }, command: Command) =>
      withTusk(command, async (tusk) => {
        const list = await tusk.schedules.list();
        console.log(options.json ? JSON.stringify(list, null, 2) : scheduleTable(list));
      }),
    );
  schedules
    .command('set')
    .argument('<name>')
    .argument('<cron>', "5 fields, or 6 with seconds first: '0 3 * * *'")
    .description('create or replace a schedule')
    .option('--task <task>', 'task of its jobs (default: the name)')
    .option('--payload <json>', "payload of its jobs, as JSON ('-': from standard input)")
    .option('--tenant <tenant>')
    .option('--queue <queue>')
    .option('--tz <zone>', 'IANA time zone of the expression (default UTC)')
    .option(
      '--backfill <n>',
      'missed ticks to run after downtime (default 0: skip them)',
      intOption('--backfill', 0, 1000),
    )
    .option('--priority <n>', 'priority of its jobs', intOption('--priority', -32768, 32767))
    .option('--max-attempts <n>', 'attempts of its jobs', intOption('--max-attempts', 1, 1000))
    .action((name: string, cron: string, o: SetOptions, command: Command) =>
      withTusk(command, async (tusk) => {
        const { payload, ...rest } = o;
        const options: ScheduleOptions = { ...rest };
        if (payload !== undefined) options.payload = await jsonArgument(payload, '--payload');
        console.log(scheduleTable([await tusk.schedule(name, cron, options)]));
      }),
    );
  schedules
    .command('remove')
    .argument('<name>')
    .description('remove a schedule (its ticks enqueued and not started, due ones included, are cancelled)')
    .action((name: string, _o, command: Command) =>
      withTusk(command, async (tusk) => {
        if (!(await tusk.schedules.remove(name))) {
          console.error(`tusk: no schedule named ${name}`);
          process.exitCode = 1;
          return;
        }
        console.log(`removed schedule ${name} (its ticks enqueued and not started are cancelled)`);
      }),
    );
  for (const paused of [true, false]) {
    schedules
      .command(paused ? 'pause' : 'resume')
      .argument('<name>')
      .description(
        paused
          ? 'pause a schedule: no tick is enqueued, its ticks enqueued and not started (due ones included) are cancelled'
          : 'resume a paused schedule at its next tick from now (the ticks of the pause are skipped)',
      )
      .action((name: string, _o, command: Command) =>
        withTusk(command, async (tusk) => {
          const info = paused ? await tusk.schedules.pause(name) : await tusk.schedules.resume(name);
          if (!info) {
            console.error(`tusk: no schedule named ${name}`);
            process.exitCode = 1;
            return;
          }
          console.log(scheduleTable([info]));
        }),
      );
  }
  schedules
    .command('sync')
    .argument('<file>', 'a crontab file (see docs/guide.md, Recurring jobs)')
    .description("make a crontab file's schedules the ones in force (what `tusk worker --crontab` does at start)")
    .action((file: string, _o, command: Command) => withTusk(command, (tusk) => syncCrontabFile(tusk, file)));
}
