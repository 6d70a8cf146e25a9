// The CLI as a newcomer meets it: one-line errors for database failures and bad options,
// enqueue's options named like the API's, worker modules in TypeScript, readable logs on
// a terminal.
import { spawn } from 'node:child_process';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { logFormat } from '../src/log.js';
import { CLI, cliEnv, exited, startWorker, tusk } from './cli.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const env = () => cliEnv(db.url, db.schema);
const TS_FIXTURE = new URL('./fixtures/tasks.ts', import.meta.url).pathname;
const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

describe('errors: one line, exit code 1', () => {
  const failing = async (url: string | undefined, ...args: string[]) => {
    const e: NodeJS.ProcessEnv = { ...env() };
    if (url === undefined) delete e.DATABASE_URL;
    else e.DATABASE_URL = url;
    return tusk(e, ...args);
  };

  it('database failures name the server, what went wrong and where the URL came from', async () => {
    const host = new URL(db.url).hostname;
    const port = new URL(db.url).port || '5432';
    const cases: Array<[string | undefined, string[], string]> = [
      [
        'postgres://postgres@127.0.0.1:1/test',
        ['status', '1'],
        'tusk: cannot connect to 127.0.0.1:1: connection refused (DATABASE_URL)\n',
      ],
      [
        'postgres://postgres@localhost:1/test',
        ['enqueue', 't'],
        'tusk: cannot connect to localhost:1: connection refused (DATABASE_URL)\n',
      ],
      [
        undefined,
        ['--database-url', 'postgres://postgres@127.0.0.1:1/test', 'stats'],
        'tusk: cannot connect to 127.0.0.1:1: connection refused (--database-url)\n',
      ],
      [
        'postgres://postgres@no-such-host.invalid/test',
        ['status', '1'],
        'tusk: cannot connect to no-such-host.invalid:5432: unknown host (DATABASE_URL)\n',
      ],
      [
        db.url.replace(/\/[^/?]*(\?|$)/, '/tusk_no_such_database$1'),
        ['migrate'],
        `tusk: cannot connect to ${host}:${port}: database "tusk_no_such_database" does not exist (DATABASE_URL)\n`,
      ],
      [
        'notaurl',
        ['status', '1'],
        'tusk: DATABASE_URL: is not a PostgreSQL URL (postgres://user:password@host:5432/database)\n',
      ],
      [
        'http://example.com/db',
        ['status', '1'],
        'tusk: DATABASE_URL: is not a PostgreSQL URL: its scheme is http: (postgres://user:password@host:5432/database)\n',
      ],
    ];
    for (const [url, args, stderr] of cases) {
      const r = await failing(url, ...args);
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ args, code: 1, stdout: '', stderr });
    }
  });

  it("commander's errors read like the others, with where to find help", async () => {
    const cases: Array<[string[], string]> = [
      [['enqueue', 't', '--bogus'], "tusk: unknown option '--bogus' (see tusk enqueue --help)\n"],
      [['schedules', 'set', 'x'], "tusk: missing required argument 'cron' (see tusk schedules set --help)\n"],
      [['enqeue'], "tusk: unknown command 'enqeue' (Did you mean enqueue?) (see tusk --help)\n"],
      [['worker'], "tusk: required option '-r, --require <module>' not specified (see tusk worker --help)\n"],
      [
        ['enqueue', 't', '--delay-ms', '-5'],
        'tusk: --delay-ms: must be an integer from 0 to 3155760000000 (got "-5")\n',
      ],
      [['worker', '-r', 'x.mjs', '-q', 'a,b,c'], 'tusk: --queue: takes name or name,weight (got "a,b,c")\n'],
    ];
    for (const [args, stderr] of cases) {
      const r = await tusk(env(), ...args);
      expect({ args, code: r.code, stderr: r.stderr }).toEqual({ args, code: 1, stderr });
    }
  });

  it('help: -q says its default once', async () => {
    const help = (await tusk(env(), 'worker', '--help')).stdout;
    expect(help).toMatch(/queue to serve, repeatable \(default: all queues\)\n/);
    expect(help).not.toMatch(/default: \[\]/);
  });
});

describe('tusk enqueue: the API options, in kebab case', () => {
  it('delay, run-at, expiry, concurrency key, source, priority and attempts are stored', async () => {
    const runAt = '2031-02-03T04:05:06.000Z';
    const expiresAt = '2032-01-01T00:00:00.000Z';
    const r = await tusk(
      env(),
      'enqueue',
      'opts',
      '{"a":1}',
      '--run-at',
      runAt,
      '--expires-at',
      expiresAt,
      '--concurrency-key',
      'acct-9',
      '--source',
      'order:42:x',
      '--priority',
      '-3',
      '--max-attempts',
      '2',
    );
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const job = await db.tusk.getJob(r.stdout.trim());
    expect(job).toMatchObject({
      task: 'opts',
      payload: { a: 1 },
      state: 'scheduled',
      runAt: new Date(runAt),
      expiresAt: new Date(expiresAt),
      concurrencyKey: 'acct-9',
      source: { type: 'order', id: '42:x', method: null },
      priority: -3,
      maxAttempts: 2,
    });

    const before = Date.now();
    const delayed = await tusk(
      env(),
      'enqueue',
      'opts',
      '--delay-ms',
      '60000',
      '--source',
      '{"type":"order","id":"7","method":"ship"}',
    );
    const later = await db.tusk.getJob(delayed.stdout.trim());
    expect(later?.runAt.getTime()).toBeGreaterThanOrEqual(before + 60_000);
    expect(later?.source).toEqual({ type: 'order', id: '7', method: 'ship' });
    // the older name still works
    const old = await tusk(env(), 'enqueue', 'opts', '--delay', '60000');
    expect((await db.tusk.getJob(old.stdout.trim()))?.state).toBe('scheduled');
    const both = await tusk(env(), 'enqueue', 'opts', '--delay', '1', '--delay-ms', '1');
    expect(both).toMatchObject({
      code: 1,
      stderr: 'tusk: --delay: is the older name of --delay-ms: give one of them\n',
    });
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE task = 'opts'`);
  });

  it('--dedupe and --dedup-key: the second enqueue prints the first id and says it was deduplicated', async () => {
    const first = await tusk(env(), 'enqueue', 'dd', '{"n":1}', '--dedupe');
    const second = await tusk(env(), 'enqueue', 'dd', '{"n":1}', '--dedupe');
    expect(second.stdout).toBe(first.stdout);
    expect(second.stderr).toBe(
      `tusk: deduplicated: an unfinished job with that key exists (${first.stdout.trim()}), no job added\n`,
    );
    const k1 = await tusk(env(), 'enqueue', 'dd', '{"n":2}', '--dedup-key', 'k', '--dedup-window-ms', '60000');
    const k2 = await tusk(env(), 'enqueue', 'dd', '{"n":3}', '--dedup-key', 'k');
    expect(k2.stdout).toBe(k1.stdout);
    expect(k1.stdout).not.toBe(first.stdout);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE task = 'dd'`);
  });

  it('bad values name the flag', async () => {
    const cases: Array<[string[], RegExp]> = [
      [
        ['--run-at', 'tomorrow'],
        /^tusk: --run-at: must be an ISO 8601 time such as 2026-05-01T09:00:00Z \(got "tomorrow"\)\n$/,
      ],
      [['--expires-at', '2026-13-45T00:00'], /^tusk: --expires-at: must be an ISO 8601 time/],
      [['--source', 'order'], /^tusk: --source: takes type:id \(order:42\) or JSON/],
      [['--source', '{"type":"order"}'], /^tusk: --source\.id: /],
      [['--dedup-key', ''], /^tusk: --dedup-key: must not be empty/],
      [['--concurrency-key', ''], /^tusk: --concurrency-key: must not be empty/],
    ];
    for (const [args, stderr] of cases) {
      const r = await tusk(env(), 'enqueue', 'bad', ...args);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 1, stdout: '' });
      expect(r.stderr, args.join(' ')).toMatch(stderr);
    }
    expect(await db.rows(`SELECT 1 FROM $schema.jobs WHERE task = 'bad'`)).toHaveLength(0);
  });

  it('serve: a headers bound over the request bound names the flags, before connecting', async () => {
    // no server at this address: the check comes first
    const r = await tusk(
      { ...env(), DATABASE_URL: 'postgres://127.0.0.1:1/none' },
      'serve',
      '--headers-timeout-ms',
      '60000',
      '--port',
      '0',
    );
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 1, stdout: '' });
    expect(r.stderr).toMatch(
      /^tusk: --headers-timeout-ms: must be at most --request-timeout-ms \(30000, its default\) \(got 60000\)\n$/,
    );
  });
});

describe('tusk worker --require a TypeScript module', () => {
  it('loads it through tsx when the project has tsx', async () => {
    const { id } = await db.tusk.enqueue('greet', { name: 'ts' }, { queue: 'ts-module' });
    const child = spawn(process.execPath, [CLI, 'worker', '--require', TS_FIXTURE, '-q', 'ts-module'], {
      env: env(),
      stdio: 'pipe',
    });
    let stderr = '';
    child.stderr?.on('data', (d) => {
      stderr += d;
    });
    try {
      const job = await eventually(async () => {
        const j = await db.tusk.getJob(id);
        return j?.state === 'succeeded' ? j : null;
      }, 30_000);
      expect(job?.result).toBe('greet: hello ts');
    } finally {
      child.kill('SIGTERM');
      expect(await exited(child), stderr).toBe(0);
    }
  });

  it('without tsx: one line saying how (where Node cannot strip types itself)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tusk-ts-module-'));
    dirs.push(dir);
    const file = join(dir, 'tasks.ts');
    await copyFile(TS_FIXTURE, file);
    const r = await tusk(env(), 'worker', '--require', file);
    if ((process.features as { typescript?: unknown }).typescript) {
      // Node 22.6+ strips the types itself: the module loads and the worker runs
      expect(r.stderr).not.toMatch(/tsx/);
      return;
    }
    expect(r).toMatchObject({
      code: 1,
      stderr:
        `tusk: ${file} is TypeScript and tsx is not installed: run \`npm install --save-dev tsx\` in your project ` +
        '(tusk then loads .ts modules through it), or compile it and give the .js file\n',
    });
  });
});

describe('logs', () => {
  it('readable lines on a terminal, JSON lines otherwise; TUSK_LOG_FORMAT chooses', async () => {
    expect(logFormat(undefined, true)).toBe('pretty');
    expect(logFormat(undefined, false)).toBe('json');
    expect(logFormat('json', true)).toBe('json');
    expect(logFormat('pretty', false)).toBe('pretty');

    // a worker logs "worker started" at info
    const firstLine = async (format?: string) => {
      const e: NodeJS.ProcessEnv = { ...env(), TUSK_LOG_LEVEL: 'info' };
      if (format) e.TUSK_LOG_FORMAT = format;
      const child = startWorker(e, '-q', 'log-format');
      let stderr = '';
      child.stderr?.on('data', (d) => {
        stderr += d;
      });
      await eventually(() => stderr.includes('worker started'), 30_000);
      child.kill('SIGTERM');
      await exited(child);
      return stderr.split('\n')[0] ?? '';
    };
    expect(JSON.parse(await firstLine())).toMatchObject({ level: 30, name: 'tusk', msg: 'worker started' });
    const pretty = await firstLine('pretty');
    expect(pretty).toMatch(
      /^\[\d{2}:\d{2}:\d{2}\.\d{3}\] .*INFO.*: .*worker started.* \{"worker":\d+,"concurrency":10,"queues":\["log-format"\]\}$/,
    );
  });
});
