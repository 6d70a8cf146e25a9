// Bad input to the CLI: each command either exits 1 with an error naming the option or
// field and writes nothing, or is legal and stores exactly what it was given. Option
// parsers are checked in-process (exhaustively, cheaply); each way a command can refuse
// is checked end to end once, in a process (each costs ~0.3 s of CPU to start).
import { spawn } from 'node:child_process';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { timeOption } from '../src/cli/commands/enqueue.js';
import { limitOption, RESET, rateOption } from '../src/cli/commands/tenants.js';
import { parseQueue } from '../src/cli/commands/worker.js';
import { intOption } from '../src/cli/context.js';
import { TuskValidationError } from '../src/index.js';
import { fingerprint, isLegalName, jsonData, nameLike } from './badInput.js';
import { CLI, cliEnv, FIXTURE } from './cli.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const MIB = 1024 * 1024;

afterEach(() => db.pool.query(`DELETE FROM "${db.schema}".jobs`));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `tusk ...args` with `input` on its standard input. */
function run(args: string[], input?: string | Uint8Array): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: cliEnv(db.url, db.schema) });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.on('error', () => {}); // a command refused before reading its input closes it
    child.stdin.end(input);
  });
}

/** Runs `calls` three at a time (each starts a process; the machine has two cores). */
async function pooled<T, R>(items: T[], call: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < items.length; i = next++) results[i] = await call(items[i] as T);
  };
  await Promise.all([lane(), lane(), lane()]);
  return results;
}

type Case = [name: string, args: string[], stderr: RegExp, input?: string | Uint8Array];

/** Every case exits 1 with its message on stderr, prints nothing, and no table changes. */
async function expectAllRefused(cases: Case[]): Promise<void> {
  const before = await fingerprint(db);
  const runs = await pooled(cases, ([, args, , input]) => run(args, input));
  for (const [i, [name, , stderr]] of cases.entries()) {
    const r = runs[i] as Run;
    expect({ name, code: r.code, stdout: r.stdout }, r.stderr).toEqual({ name, code: 1, stdout: '' });
    expect(r.stderr, name).toMatch(stderr);
  }
  expect(await fingerprint(db)).toEqual(before);
}

describe('option parsers', () => {
  /** The value, or the error's message. */
  const parsed = <T>(parse: (value: string) => T, value: string): T | string => {
    try {
      return parse(value);
    } catch (error) {
      expect(error).toBeInstanceOf(TuskValidationError);
      return (error as Error).message;
    }
  };

  it('integers: decimal digits only, in range; the error names the option and shows the value', () => {
    const delay = intOption('--delay', 0, 3155760000000);
    expect(parsed(delay, '0')).toBe(0);
    expect(parsed(delay, '3155760000000')).toBe(3155760000000);
    for (const bad of ['-5', '1.5', '1e3', '', ' ', ' 5', '5 ', '0x10', '+5', 'Infinity', 'NaN', '3155760000001']) {
      expect(parsed(delay, bad)).toBe(
        `--delay: must be an integer from 0 to 3155760000000 (got ${JSON.stringify(bad)})`,
      );
    }
    expect(parsed(intOption('--concurrency', 1), '0')).toBe('--concurrency: must be an integer >= 1 (got "0")');
    expect(parsed(intOption('--priority', -32768, 32767), '-32768')).toBe(-32768);
  });

  it('property: an integer option takes a string iff it is decimal digits in range, as that number', () => {
    const option = intOption('--n', -50, 1000);
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 6 }), fc.integer({ min: -100, max: 2000 }).map(String)), (text) => {
        const legal = /^-?\d+$/.test(text) && Number(text) >= -50 && Number(text) <= 1000;
        expect(parsed(option, text)).toEqual(
          legal ? Number(text) : expect.stringMatching(/^--n: must be an integer from -50 to 1000 \(got /),
        );
      }),
      { numRuns: 200 },
    );
  });

  it('times: ISO 8601 on a day and at a time that exist, not rolled over', () => {
    const runAt = timeOption('--run-at');
    expect(parsed(runAt, '2032-02-29T09:00:00Z')).toEqual(new Date('2032-02-29T09:00:00Z'));
    expect(parsed(runAt, '2030-12-31T23:59:59+02:00')).toEqual(new Date('2030-12-31T21:59:59Z'));
    for (const bad of [
      '2030-02-30T09:00:00Z',
      '2031-02-29T00:00:00Z',
      '2030-04-31T00:00:00Z',
      '2030-13-01T00:00:00Z',
      '2030-01-01T24:00:00Z',
      '2030-01-01T10:60:00Z',
      'tomorrow',
      '',
    ])
      expect(parsed(runAt, bad)).toBe(
        `--run-at: must be an ISO 8601 time such as 2026-05-01T09:00:00Z (got ${JSON.stringify(bad)})`,
      );
  });

  it('tenant limits and rates; queues with weights', () => {
    const slots = limitOption('--slots', ['default']);
    expect(parsed(slots, '5')).toBe(5);
    expect(parsed(slots, 'default')).toBe(RESET);
    for (const bad of ['0', '-1', '1.5', '', 'none', '1e2']) {
      expect(parsed(slots, bad)).toBe(`--slots: takes a positive integer or default (got ${JSON.stringify(bad)})`);
    }
    expect(parsed(rateOption, '100/60000')).toEqual({ limit: 100, perMs: 60000 });
    expect(parsed(rateOption, 'none')).toBe(RESET);
    for (const bad of ['100', '1e2/6e4', '/', '5/', '1/2/3', ' 1/2', '-1/5']) {
      expect(parsed(rateOption, bad)).toMatch(
        /^--rate: takes <limit>\/<window ms> \(e\.g\. 100\/60000\) or 'none' \(got /,
      );
    }
    expect(parsed((v) => parseQueue(v, []), 'mail,8')).toEqual([['mail', 8]]);
    expect(parsed((v) => parseQueue(v, []), 'mail')).toEqual(['mail']);
    expect(parsed((v) => parseQueue(v, []), '')).toBe('--queue: takes name or name,weight (got "")');
    expect(parsed((v) => parseQueue(v, []), 'a,0')).toBe(
      '--queue: the weight of a must be a positive number (got "0")',
    );
    expect(parsed((v) => parseQueue(v, []), 'a,1,2')).toBe('--queue: takes name or name,weight (got "a,1,2")');
  });
});

describe('tusk enqueue', () => {
  it('refuses bad payloads, names and options: exit code 1, the field named, nothing written', async () => {
    await expectAllRefused([
      ['payload not JSON', ['enqueue', 't', "{'a': 1}"], /^tusk: payload: is not valid JSON/],
      ['payload JSON would change', ['enqueue', 't', '{"n": [1e400]}'], /^tusk: payload\.n\[0\]: must not be Infinity/],
      [
        'payload over 1 MiB, from stdin',
        ['enqueue', 't', '-'],
        /^tusk: payload: is 1048584 bytes as JSON, over the limit of 1048576 \(option maxPayloadBytes\)/,
        JSON.stringify({ s: 'x'.repeat(MIB) }),
      ],
      [
        'payload not UTF-8, from stdin',
        ['enqueue', 't', '-'],
        /^tusk: payload: is not valid UTF-8/,
        new Uint8Array([0x22, 0xff, 0x22]),
      ],
      ['task with a newline', ['enqueue', 'a\nb'], /^tusk: task: must not contain control characters/],
      ['empty tenant', ['enqueue', 't', '--tenant', ''], /^tusk: --tenant: must not be empty/],
      [
        'delay in e-notation',
        ['enqueue', 't', '--delay', '1e3'],
        /^tusk: --delay: must be an integer from 0 to 3155760000000 \(got "1e3"\)\n$/,
      ],
      [
        'typo: --tennant',
        ['enqueue', 't', '--tennant', 'a'],
        /^tusk: unknown option '--tennant' \(Did you mean --tenant\?\) \(see tusk enqueue --help\)\n$/,
      ],
      [
        'one argument too many',
        ['enqueue', 't', '{}', '{}'],
        /^tusk: too many arguments for 'enqueue'\. Expected 2 arguments but got 3\. \(see tusk enqueue --help\)\n$/,
      ],
    ]);
  });

  it('stores legal input exactly: unicode names, SQL-looking text, payloads from stdin up to the limit', async () => {
    const name = "顧客 'x'; DROP TABLE jobs; -- 👋";
    const payload = { 名前: ['héllo', { '👋': 'שלום\t"quoted"\n' }], n: 1.5e300 };
    const [inline, biggest] = (await pooled(
      [
        [['enqueue', name, JSON.stringify(payload), '--tenant', name, '--queue', name]],
        [['enqueue', 'biggest', '-'], `"${'x'.repeat(MIB - 2)}"`],
      ] as Array<[string[], string?]>,
      ([args, input]) => run(args, input),
    )) as Run[];
    for (const r of [inline, biggest] as Run[]) expect(r.code, r.stderr).toBe(0);
    const status = await run(['status', (inline as Run).stdout.trim()]);
    expect(JSON.parse(status.stdout)).toMatchObject({ task: name, tenant: name, queue: name, payload });
    expect((await db.tusk.getJob((biggest as Run).stdout.trim()))?.payload).toHaveLength(MIB - 2);
  });

  it('property: tenants on the command line and JSON piped in are stored exactly if legal, else refused', async () => {
    // a command line cannot carry NUL or lone surrogates (the OS gets UTF-8 C strings)
    const argument = nameLike(128).filter((s) => s.isWellFormed() && !s.includes('\u0000'));
    await fc.assert(
      fc.asyncProperty(fc.tuple(argument, argument), jsonData, async (tenants, payload) => {
        const before = await fingerprint(db);
        const runs = await pooled([...tenants, null], (tenant) =>
          tenant === null
            ? run(['enqueue', 'piped', '-'], JSON.stringify(payload))
            : run(['enqueue', 'named', '--tenant', tenant]),
        );
        let written = 1;
        for (const [i, tenant] of tenants.entries()) {
          const r = runs[i] as Run;
          if (isLegalName(tenant, 128)) {
            expect(r.code, r.stderr).toBe(0);
            expect((await db.tusk.getJob(r.stdout.trim()))?.tenant).toBe(tenant);
            written++;
          } else {
            expect(r.code).toBe(1);
            expect(r.stderr).toMatch(/^tusk: --tenant: /);
          }
        }
        const piped = runs[2] as Run;
        expect(piped.code, piped.stderr).toBe(0);
        // JSON.stringify writes -0 as 0
        expect((await db.tusk.getJob(piped.stdout.trim()))?.payload).toEqual(JSON.parse(JSON.stringify(payload)));
        const after = await fingerprint(db);
        expect(after.jobs).toMatch(new RegExp(`^${Number(before.jobs?.split(' ')[0]) + written} rows`));
        expect({ ...after, jobs: '' }).toEqual({ ...before, jobs: '' });
        await db.pool.query(`DELETE FROM "${db.schema}".jobs`);
      }),
      { numRuns: 2 },
    );
  });
});

describe('other commands', () => {
  it('refuse bad names and options: exit code 1, the option or field named, nothing written', async () => {
    await db.tusk.tenants.set('cli-bad', { slots: 3 });
    await expectAllRefused([
      ['tenant with a newline', ['tenants', 'set', 'a\nb', '--slots', '1'], /^tusk: tenant: must not contain control/],
      [
        'slots 0',
        ['tenants', 'set', 'cli-bad', '--slots', '0'],
        /^tusk: --slots: takes a positive integer or default \(got "0"\)/,
      ],
      [
        'rate without a window',
        ['tenants', 'set', 'cli-bad', '--rate', '100'],
        /^tusk: --rate: takes <limit>\/<window ms>/,
      ],
      [
        'rate limit 0',
        ['tenants', 'set', 'cli-bad', '--rate', '0/1000'],
        /^tusk: settings\.rate\.limit: must be an integer from 1/,
      ],
      ['retention', ['tenants', 'default', '--retention', 'never'], /^tusk: settings\.retention: must be a period/],
      [
        'pause and resume',
        ['tenants', 'set', 'cli-bad', '--pause', '--resume'],
        /^tusk: options: give --pause or --resume/,
      ],
      [
        'concurrency 0',
        ['worker', '-r', FIXTURE, '--concurrency', '0'],
        /^tusk: --concurrency: must be an integer >= 1 \(got "0"\)\n$/,
      ],
      [
        'prefetch a word',
        ['worker', '-r', FIXTURE, '--prefetch', 'lots'],
        /^tusk: --prefetch: must be an integer >= 0 \(got "lots"\)\n$/,
      ],
      [
        'concurrency too high',
        ['worker', '-r', FIXTURE, '-c', '20000'],
        /^tusk: worker options\.concurrency: must be an integer from 1 to 10000 \(got 20000\)/,
      ],
      [
        'schedule payload not JSON',
        ['schedules', 'set', 'n', '0 3 * * *', '--payload', '{x'],
        /^tusk: --payload: is not valid JSON/,
      ],
      [
        'schedule payload JSON would change',
        ['schedules', 'set', 'n', '0 3 * * *', '--payload', '[1e999]'],
        /^tusk: options\.payload\[0\]: must not be Infinity/,
      ],
      ['schedule time zone', ['schedules', 'set', 'n', '0 3 * * *', '--tz', 'Mars/Olympus'], /^tusk: options\.tz: /],
      ['status of a word', ['status', 'abc'], /^tusk: id: must be a job id: a positive integer \(got "abc"\)/],
    ]);
    expect((await db.tusk.tenants.get('cli-bad'))?.ownSlots).toBe(3);
  });
});
