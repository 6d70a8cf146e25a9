// npm run bench -- [suite] [options]: benchmarks that print tables and write
// bench/results/*.json. Suites: peers (the default), scaling, fairness, lanes, pinned, profile, drain, history.
import { Command, InvalidArgumentError } from 'commander';
import { benchDatabase, writeSummary } from './lib/env.js';
import { drain } from './suites/drain.js';
import { fairness } from './suites/fairness.js';
import { history } from './suites/history.js';
import { lanes } from './suites/lanes.js';
import { peers, TARGETS, type Target } from './suites/peers.js';
import { pinned } from './suites/pinned.js';
import { profile } from './suites/profile.js';
import { scaling } from './suites/scaling.js';

const int = (name: string) => (v: string) => {
  const n = Number(v.replaceAll('_', ''));
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return n;
};

const program = new Command('bench')
  .description('Tusk benchmarks (DATABASE_URL, else an embedded PostgreSQL)')
  .showHelpAfterError();

// A full run's report becomes the suite's summary in docs/benchmarks/ (a quick run only prints).
let printed: string[] | null = null;
const print = console.log;
program.hook('preAction', (_program, action) => {
  if (action.opts().quick) return;
  printed = [];
  console.log = (...args: unknown[]) => {
    printed?.push(args.map(String).join(' '));
    print(...args);
  };
});
program.hook('postAction', async (_program, action) => {
  console.log = print;
  if (!printed) return;
  const command = ['npm run bench --', action.name(), ...action.args].join(' ');
  const file = await writeSummary(action.name(), command, printed.join('\n'));
  print(`summary kept in ${file}`);
});

const targets = (v: string): Target[] => {
  const list = v.split(',').map((s) => s.trim().toLowerCase());
  const bad = list.filter((s) => !(TARGETS as readonly string[]).includes(s));
  if (bad.length || list.length === 0) {
    throw new InvalidArgumentError(`unknown system ${bad.join(', ')}; choose among ${TARGETS.join(',')}`);
  }
  return list as Target[];
};

program
  .command('peers', { isDefault: true })
  .description(
    'Tusk vs graphile-worker, pg-boss and BullMQ, one at a time: bulk enqueue, drain (defaults, tuned), ' +
      'enqueue→start latency, worker RSS; and bare-SQL ceilings (DELETE … SKIP LOCKED, the same keeping ' +
      'history, INSERT … SELECT generate_series)',
  )
  .option('--jobs <n>', 'jobs per bulk enqueue and drain', int('--jobs'), 100_000)
  .option(
    '--latency-jobs <n>',
    'jobs of the latency run, enqueued one at a time 5 ms apart',
    int('--latency-jobs'),
    1000,
  )
  .option('--quick', 'a smoke run (jobs 5 000, latency jobs 200)')
  .option('--only <systems>', `comma list among ${TARGETS.join(',')} (default: all)`, targets)
  .option('--drain-timeout <s>', 'give up on a drain after this long (rate from what finished)', int('--drain-timeout'))
  .option('--strict', 'exit 1 when a goal is not met')
  .action(
    async (options: {
      jobs: number;
      latencyJobs: number;
      quick?: boolean;
      only?: Target[];
      drainTimeout?: number;
      strict?: boolean;
    }) => {
      const db = await benchDatabase();
      try {
        await peers({
          url: db.url,
          jobs: options.quick ? 5000 : options.jobs,
          latencyJobs: options.quick ? 200 : options.latencyJobs,
          only: options.only ?? [...TARGETS],
          drainTimeoutMs: (options.drainTimeout ?? (options.quick ? 180 : 900)) * 1000,
          latencyWaitMs: options.quick ? 10_000 : 30_000,
          strict: options.strict ?? false,
        });
      } finally {
        await db.close();
      }
    },
  );

program
  .command('scaling')
  .description('Tusk drain rate and claim time with a small vs a huge backlog, over a large job_history')
  .option('--small <n>', 'the small backlog', int('--small'), 10_000)
  .option('--large <n>', 'the large backlog', int('--large'), 1_000_000)
  .option('--history <n>', 'rows put in job_history first', int('--history'), 1_000_000)
  .option('--drain <n>', 'jobs drained in each case (at most the backlog)', int('--drain'), 50_000)
  .option('--quick', 'a smoke run (backlogs 2 000 / 50 000, history 50 000, drain 20 000)')
  .action(async (options: { small: number; large: number; history: number; drain: number; quick?: boolean }) => {
    const db = await benchDatabase();
    try {
      await scaling({
        url: db.url,
        small: options.quick ? 2000 : options.small,
        large: options.quick ? 50_000 : options.large,
        history: options.quick ? 50_000 : options.history,
        drain: options.quick ? 20_000 : options.drain,
        claims: 50,
      });
    } finally {
      await db.close();
    }
  });

program
  .command('fairness')
  .description('small tenants vs a flooding tenant: start latency, and claim time at a small vs huge backlog')
  .option('--backlog <n>', "the flooding tenant's backlog", int('--backlog'), 1_000_000)
  .option('--tenants <n>', 'small tenants with one job each', int('--tenants'), 50)
  .option('--timeout <s>', 'give up on small jobs after this many seconds', int('--timeout'), 30)
  .option('--quick', 'a short run (backlog 20 000, timeout 10 s)')
  .action(async (options: { backlog: number; tenants: number; timeout: number; quick?: boolean }) => {
    const db = await benchDatabase();
    try {
      const ok = await fairness({
        url: db.url,
        backlog: options.quick ? 20_000 : options.backlog,
        smallBacklog: 1000,
        tenants: options.tenants,
        jobMs: 20,
        processes: 2,
        concurrency: 16,
        timeoutMs: (options.quick ? 10 : options.timeout) * 1000,
      });
      if (!ok) process.exitCode = 1;
    } finally {
      await db.close();
    }
  });

program
  .command('lanes')
  .description("the lane flood: another tenant's fetch while one tenant has 150 000 distinct concurrency keys waiting")
  .option('--keys <n>', "the flooding tenant's distinct keys", int('--keys'), 150_000)
  .option('--fetches <n>', 'fetches timed per case', int('--fetches'), 50)
  .option('--quick', 'a smoke run (20 000 keys, 20 fetches)')
  .action(async (options: { keys: number; fetches: number; quick?: boolean }) => {
    const db = await benchDatabase();
    try {
      const ok = await lanes({
        url: db.url,
        keys: options.quick ? 20_000 : options.keys,
        fetches: options.quick ? 20 : options.fetches,
      });
      if (!ok) process.exitCode = 1;
    } finally {
      await db.close();
    }
  });

program
  .command('pinned')
  .description('claim time as jobs go through while a transaction pins the xmin horizon')
  .option('--jobs <n>', 'jobs handled while the horizon is pinned, per case', int('--jobs'), 100_000)
  .option('--batch <n>', 'jobs per claim', int('--batch'), 16)
  .option('--quick', 'a smoke run (20 000 jobs)')
  .action(async (options: { jobs: number; batch: number; quick?: boolean }) => {
    const db = await benchDatabase();
    try {
      const ok = await pinned({
        url: db.url,
        jobs: options.quick ? 20_000 : options.jobs,
        batch: options.batch,
        checkpoints: options.quick ? 2 : 5,
      });
      if (!ok) process.exitCode = 1;
    } finally {
      await db.close();
    }
  });

program
  .command('profile')
  .description(
    "where a tuned drain's time goes: the worker's CPU, its PostgreSQL backends' CPU, their waits and statements",
  )
  .option('--jobs <n>', 'jobs drained', int('--jobs'), 100_000)
  .option('--quick', 'a smoke run (10 000 jobs)')
  .action(async (options: { jobs: number; quick?: boolean }) => {
    const db = await benchDatabase();
    try {
      await profile({ url: db.url, jobs: options.quick ? 10_000 : options.jobs });
    } finally {
      await db.close();
    }
  });

program
  .command('drain')
  .description('staged jobs forwarded by one drainer to BullMQ (and to Tusk), against BullMQ addBulk alone')
  .option('--jobs <n>', 'jobs staged per run', int('--jobs'), 100_000)
  .option(
    '--batch-sizes <list>',
    'drain batch sizes to compare',
    (v) => v.split(',').map(int('--batch-sizes')),
    [100, 1000],
  )
  .option('--redis-url <url>', 'Redis of BullMQ', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
  .option('--quick', 'a smoke run (5 000 jobs)')
  .action(async (options: { jobs: number; batchSizes: number[]; redisUrl: string; quick?: boolean }) => {
    const db = await benchDatabase();
    try {
      await drain({
        url: db.url,
        redisUrl: options.redisUrl,
        jobs: options.quick ? 5000 : options.jobs,
        batchSizes: options.batchSizes,
      });
    } finally {
      await db.close();
    }
  });

program
  .command('history')
  .description(
    'Tusk on empty tables vs a huge job_history and many scheduled jobs: claim time, drain rate, getJob, last-100 query',
  )
  .option('--history <n>', 'finished jobs put in job_history', int('--history'), 10_000_000)
  .option('--scheduled <n>', 'scheduled jobs waiting in jobs', int('--scheduled'), 1_000_000)
  .option('--tenants <n>', 'tenants the history is spread over', int('--tenants'), 1000)
  .option('--days <n>', 'days (day partitions) the history is spread over', int('--days'), 30)
  .option('--drain <n>', 'jobs drained in each case', int('--drain'), 50_000)
  .option('--lookups <n>', 'getJob calls and last-100 queries timed in each case', int('--lookups'), 500)
  .option('--quick', 'a smoke run (history 200 000, scheduled 20 000, drain 20 000, lookups 200)')
  .option('--strict', 'exit 1 when a goal is not met')
  .action(
    async (options: {
      history: number;
      scheduled: number;
      tenants: number;
      days: number;
      drain: number;
      lookups: number;
      quick?: boolean;
      strict?: boolean;
    }) => {
      const db = await benchDatabase();
      try {
        const { quick, strict, ...sizes } = options;
        const ok = await history({
          url: db.url,
          ...sizes,
          ...(quick ? { history: 200_000, scheduled: 20_000, drain: 20_000, lookups: 200 } : {}),
          claims: 50,
        });
        if (!ok && strict) process.exitCode = 1;
      } finally {
        await db.close();
      }
    },
  );

await program.parseAsync();
