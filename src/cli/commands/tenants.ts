import type { Command } from 'commander';
import type { TenantInfo } from '../../client/tenants.js';
import { TuskValidationError } from '../../errors.js';
import type { TenantSettings } from '../../queries/tenants.js';
import { optionError, withTusk } from '../context.js';
import { renderTable } from '../table.js';

/** Marks a limit option given as default/none/unlimited (commander turns null into ''). */
export const RESET = 'reset';
type Limit = number | typeof RESET;
const toLimit = (value: Limit | undefined) => (value === RESET ? null : value);

/** `100/60000` → { limit: 100, perMs: 60000 }; `none` → RESET. */
export function rateOption(value: string): TenantSettings['rate'] | typeof RESET {
  if (value === 'none') return RESET;
  const match = /^(\d{1,16})\/(\d{1,16})$/.exec(value);
  if (!match) {
    throw optionError('--rate', `takes <limit>/<window ms> (e.g. 100/60000) or 'none' (got ${JSON.stringify(value)})`);
  }
  return { limit: Number(match[1]), perMs: Number(match[2]) };
}

/** A retention period, or one of `words` for a reset (validated by the API). */
const retentionOption = (words: string[]) => (value: string) => (words.includes(value) ? RESET : value);

/** `5` → 5; the words the option accepts (`default`, `none`, `unlimited`) → RESET. */
export function limitOption(name: string, words: string[]) {
  return (value: string): Limit => {
    if (words.includes(value)) return RESET;
    const n = /^\d{1,16}$/.test(value) ? Number(value) : 0;
    if (n < 1) {
      throw optionError(name, `takes a positive integer or ${words.join('/')} (got ${JSON.stringify(value)})`);
    }
    return n;
  };
}

export function tenantTable(tenants: TenantInfo[]): string {
  return renderTable(
    [
      'tenant',
      'slots',
      'per key',
      'rate',
      'retention',
      'paused',
      'running',
      'waiting',
      'scheduled',
      'retrying',
      'oldest wait ms',
    ],
    tenants.map((t) => [
      t.tenant,
      t.slots === null ? 'unlimited' : `${t.slots}${t.ownSlots === null ? ' (default)' : ''}`,
      t.perKey,
      t.rate === null ? null : `${t.rate.limit}/${t.rate.perMs}ms`,
      t.retention === null ? 'forever' : `${t.retention}${t.ownRetention === null ? ' (default)' : ''}`,
      t.paused ? 'yes' : 'no',
      t.running,
      t.available,
      t.scheduled,
      t.retrying,
      t.oldestWaitingMs === null ? null : Math.round(t.oldestWaitingMs),
    ]),
  );
}

export function tenantsCommand(program: Command): void {
  const tenants = program.command('tenants').description('per-tenant slots, concurrency-key limits and pausing');
  tenants
    .command('list')
    .description('every tenant with settings or unfinished jobs')
    .action((_o, command: Command) =>
      withTusk(command, async (tusk) => console.log(tenantTable(await tusk.tenants.list()))),
    );
  tenants
    .command('get')
    .argument('<tenant>')
    .description('one tenant as JSON')
    .action((tenant: string, _o, command: Command) =>
      withTusk(command, async (tusk) => {
        const info = await tusk.tenants.get(tenant);
        if (!info) {
          console.error(`tusk: no tenant named ${tenant}: it has no settings and no unfinished jobs`);
          process.exitCode = 1;
          return;
        }
        console.log(JSON.stringify(info, null, 2));
      }),
    );
  tenants
    .command('set')
    .argument('<tenant>')
    .description('create a tenant or change its settings (others stay as they are)')
    .option('--slots <n>', "jobs it may run at once, or 'default'", limitOption('--slots', ['default']))
    .option('--per-key <n>', "running jobs per concurrency key, or 'none'", limitOption('--per-key', ['none']))
    .option('--rate <limit/ms>', "at most <limit> job starts per window of <ms>, or 'none'", rateOption)
    .option(
      '--retention <period>',
      "keep its finished jobs that long ('90 days'), or 'default'",
      retentionOption(['default']),
    )
    .option('--pause', 'stop new claims for it')
    .option('--resume', 'claim its jobs again')
    .action(
      (
        tenant: string,
        options: {
          slots?: Limit;
          perKey?: Limit;
          rate?: TenantSettings['rate'] | typeof RESET;
          retention?: string;
          pause?: boolean;
          resume?: boolean;
        },
        command: Command,
      ) =>
        withTusk(command, async (tusk) => {
          if (options.pause && options.resume)
            throw new TuskValidationError('options', 'give --pause or --resume, not both');
          const settings: TenantSettings = {};
          if (options.slots !== undefined) settings.slots = toLimit(options.slots);
          if (options.perKey !== undefined) settings.perKey = toLimit(options.perKey);
          if (options.rate !== undefined) settings.rate = options.rate === RESET ? null : options.rate;
          if (options.retention !== undefined)
            settings.retention = options.retention === RESET ? null : options.retention;
          if (options.pause) settings.paused = true;
          if (options.resume) settings.paused = false;
          console.log(tenantTable([await tusk.tenants.set(tenant, settings)]));
        }),
    );
  for (const [name, paused] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    tenants
      .command(name)
      .argument('<tenant>')
      .description(paused ? 'stop new claims for a tenant (running jobs go on)' : 'claim its jobs again')
      .action((tenant: string, _o, command: Command) =>
        withTusk(command, async (tusk) => console.log(tenantTable([await tusk.tenants.set(tenant, { paused })]))),
      );
  }
  tenants
    .command('default')
    .description('show, or with options set, the settings of tenants without their own')
    .option('--slots <n>', "slots, or 'unlimited'", limitOption('--slots', ['unlimited']))
    .option(
      '--retention <period>',
      "keep finished jobs that long ('30 days'), or 'forever'",
      retentionOption(['forever']),
    )
    .action((options: { slots?: Limit; retention?: string }, command: Command) =>
      withTusk(command, async (tusk) => {
        const change: { slots?: number | null; retention?: string | null } = {};
        if (options.slots !== undefined) change.slots = toLimit(options.slots) ?? null;
        if (options.retention !== undefined) change.retention = options.retention === RESET ? null : options.retention;
        const { slots, retention } = await tusk.tenants.setDefault(change);
        console.log(`default slots: ${slots ?? 'unlimited'}\ndefault retention: ${retention ?? 'forever'}`);
      }),
    );
}
