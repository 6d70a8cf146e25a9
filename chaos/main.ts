// npm run chaos -- [options]: the chaos run (faults while workers work, then the books are
// checked) or, with --pressure, the pressure phases. Both on an embedded PostgreSQL of
// their own (.tusk/chaos-pg), which they restart and load as they please.
import { Command, InvalidArgumentError } from 'commander';
import { type ChaosOptions, QUICK, renderReport, runChaos } from './chaos.js';
import { type PressureOptions, renderPressure, runPressure, STRESSES, type Stress } from './pressure.js';

const int = (name: string) => (v: string) => {
  const n = Number(v.replaceAll('_', ''));
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return n;
};

let lastStep = '';
let lastAt = 0;
/** A live status line on a terminal; piped, each new step and its counters every 10 s. */
const status = (line: string) => {
  if (process.stderr.isTTY) {
    process.stderr.write(`\r\x1b[2K${line}`);
    return;
  }
  const step = line.replace(/[\d,.]+ ?\/ ?[\d,.]+.*$/, '').trim();
  if (!step || (step === lastStep && Date.now() - lastAt < 10_000)) return;
  process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);
  lastStep = step;
  lastAt = Date.now();
};

interface Options {
  jobs: number;
  tenants: number;
  workers: number;
  concurrency: number;
  killEveryMs: number;
  quick?: boolean;
  pressure?: boolean;
  phaseS: number;
  pinnedS: number;
  phases?: Set<Stress>;
  statements?: boolean;
  server: Record<string, string>;
  busy?: number;
  timeline?: string;
}

const stresses = (v: string) => {
  const names = v
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
  if (names.length === 0) throw new InvalidArgumentError(`no phase named (phases: ${STRESSES.join(', ')})`);
  const unknown = names.filter((x) => !(STRESSES as readonly string[]).includes(x));
  if (unknown.length > 0) {
    throw new InvalidArgumentError(`unknown phase ${unknown.join(', ')} (phases: ${STRESSES.join(', ')})`);
  }
  return new Set(names as Stress[]);
};

/** `name=value`, gathered over repeated --server options. */
const setting = (v: string, all: Record<string, string>) => {
  const at = v.indexOf('=');
  if (at < 1 || at === v.length - 1) throw new InvalidArgumentError(`a server setting is name=value, not "${v}"`);
  return { ...all, [v.slice(0, at).trim()]: v.slice(at + 1).trim() };
};

const percent = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 100) throw new InvalidArgumentError('--busy is a share of 1 to 100 %');
  return n;
};

const program = new Command('chaos')
  .description('Tusk under faults: kills, terminated connections, a server restart, a frozen worker')
  .option('--jobs <n>', 'jobs', int('--jobs'), 20_000)
  .option('--tenants <n>', 'tenants (slots 2, 3, 4, 5, 2, ...)', int('--tenants'), 10)
  .option('--workers <n>', 'worker processes', int('--workers'), 4)
  .option('--concurrency <n>', 'handlers per worker', int('--concurrency'), 8)
  .option('--kill-every-ms <ms>', 'a random worker is SIGKILLed about this often', int('--kill-every-ms'), 2000)
  .option('--quick', 'the short run of npm test (2 000 jobs, 3 workers); with --pressure, 20 s phases')
  .option('--pressure', 'the pressure phases instead: pinned horizon, REPEATABLE READ scans, overload, terminate storm')
  .option('--phase-s <s>', 'with --pressure: seconds per phase', int('--phase-s'), 60)
  .option('--pinned-s <s>', 'with --pressure: seconds the horizon stays pinned', int('--pinned-s'), 180)
  .option(
    '--phases <list>',
    `with --pressure: the stresses to run after the clean phase, in their fixed order (${STRESSES.join(',')})`,
    stresses,
  )
  .option('--statements', 'with --pressure: per phase, the statements that took the server most time')
  .option(
    '--server <name=value>',
    "with --pressure: a setting of the run's own server over its defaults (repeatable; e.g. io_method=sync)",
    setting,
    {},
  )
  .option(
    '--busy <percent>',
    'with --pressure: from the first stress on, another process keeps one CPU busy this share of the time',
    percent,
  )
  .option(
    '--timeline <file>',
    "with --pressure: every sample (twice a second) as a JSON line: the second's jobs started and enqueued, the backlog, dead tuples, the claims running and the oldest's age, the workers' waits, the autovacuum's phase on jobs",
  )
  .action(async (opts: Options) => {
    if (opts.pressure) {
      const p: PressureOptions = {
        workers: 2,
        concurrency: opts.concurrency,
        phaseMs: (opts.quick ? 20 : opts.phaseS) * 1000,
        pinnedMs: (opts.quick ? 30 : opts.pinnedS) * 1000,
        recoveryMaxMs: 120_000,
        calibrationMs: opts.quick ? 10_000 : 20_000,
        dir: '.tusk/pressure-pg',
        schema: 'pressure',
        ...(opts.phases ? { phases: opts.phases } : {}),
        statements: opts.statements === true,
        serverSettings: opts.server,
        ...(opts.busy ? { busyPercent: opts.busy } : {}),
        ...(opts.timeline ? { timeline: opts.timeline } : {}),
        progress: status,
      };
      const report = await runPressure(p);
      status('');
      console.log(renderPressure(report, p));
      if (opts.timeline) console.log(`\nEvery sample of the run: ${opts.timeline} (a JSON line each).`);
      if (!report.ok) process.exitCode = 1;
      return;
    }
    const options: ChaosOptions = opts.quick
      ? { ...QUICK, progress: status }
      : {
          jobs: opts.jobs,
          tenants: opts.tenants,
          workers: opts.workers,
          concurrency: opts.concurrency,
          jobMs: [20, 80],
          killEveryMs: opts.killEveryMs,
          leaseMs: 3000,
          stopMs: 6000,
          timeoutMs: 1_800_000,
          dir: '.tusk/chaos-pg',
          schema: 'chaos',
          progress: status,
        };
    const report = await runChaos(options);
    status('');
    console.log(renderReport(report, options));
    if (!report.ok) process.exitCode = 1;
  });

await program.parseAsync();
