import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { TuskError } from '../../errors.js';
import type { Tusk } from '../../tusk.js';
import type { Tasks, WorkerOptions } from '../../worker/options.js';
import { intOption, optionError, tuskFor, urlSource } from '../context.js';
import { runUntilSignal, StopSignal, startPatiently } from '../lifecycle.js';
import { readCrontabFile, syncCrontabFile } from './schedules.js';

interface Options {
  require: string;
  concurrency?: number;
  queue?: Array<string | [string, number]>;
  prefetch?: number | 'auto';
  leaseMs?: number;
  shutdownTimeoutMs?: number;
  name?: string;
  crontab?: string;
}

/** `-q critical,8` → ['critical', 8]; `-q default` → 'default'. */
export function parseQueue(value: string, previous: Options['queue'] = []): NonNullable<Options['queue']> {
  const [name, weight, extra] = value.split(',');
  if (!name || extra !== undefined)
    throw optionError('--queue', `takes name or name,weight (got ${JSON.stringify(value)})`);
  if (weight === undefined) return [...previous, name];
  const w = Number(weight);
  if (!(w > 0))
    throw optionError('--queue', `the weight of ${name} must be a positive number (got ${JSON.stringify(weight)})`);
  return [...previous, [name, w]];
}

/** What a worker module exports. */
interface WorkerModule {
  /** Task name → handler or definition, or a list of tasks made by defineTask. */
  tasks?: Tasks;
  /** Optional: called with the Tusk instance before the worker starts, to register classes. */
  setup?: (tusk: Tusk) => unknown;
  /** Optional: called after the worker stopped, to close what the module opened. */
  shutdown?: () => unknown;
}

/**
 * Loads a worker module: `tasks` and/or `setup(tusk)` (and optional `shutdown`), named or
 * on its default export.
 */
export async function loadWorkerModule(specifier: string): Promise<WorkerModule> {
  // a path (with or without ./) or a package installed here
  const local = specifier.startsWith('.') || specifier.startsWith('/') || existsSync(specifier);
  let path: string;
  try {
    path = local ? resolve(specifier) : createRequire(resolve('package.json')).resolve(specifier);
  } catch {
    throw new TuskError(`cannot find the worker module ${specifier}: not a file here nor an installed package`);
  }
  if (!existsSync(path)) throw new TuskError(`cannot find the worker module ${specifier}: no file ${path}`);
  const mod = (await importModule(specifier, path)) as WorkerModule & { default?: WorkerModule };
  const tasks = mod.tasks ?? mod.default?.tasks;
  const setup = mod.setup ?? mod.default?.setup;
  const shutdown = mod.shutdown ?? mod.default?.shutdown;
  if ((!tasks || typeof tasks !== 'object') && typeof setup !== 'function') {
    throw new TuskError(
      `${specifier} must export \`tasks\` (an object of task name → handler, or a list of tasks made by defineTask) or \`setup(tusk)\` registering classes`,
    );
  }
  return {
    ...(tasks && typeof tasks === 'object' && { tasks }),
    ...(typeof setup === 'function' && { setup }),
    ...(typeof shutdown === 'function' && { shutdown }),
  };
}

/**
 * Imports a worker module. A TypeScript one goes through tsx, found from the module's own
 * folder (the project it belongs to), else through Node's own type stripping where Node
 * has it (22.6 and later); without either, a one-line message says what to do.
 */
async function importModule(specifier: string, path: string): Promise<unknown> {
  const url = pathToFileURL(path).href;
  if (!/\.[cm]?tsx?$/.test(path)) return import(url);
  const api = tsxApi(path);
  if (api) {
    const tsx = (await import(api)) as { tsImport(specifier: string, parentURL: string): Promise<unknown> };
    return tsx.tsImport(url, url);
  }
  if ((process.features as { typescript?: unknown }).typescript) return import(url);
  throw new TuskError(
    `${specifier} is TypeScript and tsx is not installed: run \`npm install --save-dev tsx\` in your project ` +
      `(tusk then loads .ts modules through it), or compile it and give the .js file`,
  );
}

/**
 * The file URL of tsx's ESM API (`tsx/esm/api`, import condition) as installed for the
 * module at `path`, or null. Found through tsx's package.json: resolving from another
 * folder with the import condition is not available on Node 20.
 */
function tsxApi(path: string): string | null {
  let manifest: string;
  try {
    manifest = createRequire(path).resolve('tsx/package.json');
  } catch {
    return null; // not installed in that project
  }
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as {
    exports?: Record<string, { import?: string | { default?: string } }>;
  };
  const entry = exports?.['./esm/api']?.import;
  const file = typeof entry === 'string' ? entry : entry?.default;
  return file ? pathToFileURL(join(dirname(manifest), file)).href : null;
}

export function workerCommand(program: Command): void {
  program
    .command('worker')
    .description('run jobs with the task handlers a module exports (stops gracefully on SIGINT/SIGTERM)')
    .requiredOption(
      '-r, --require <module>',
      'module exporting `tasks` and/or `setup(tusk)` (and optionally `shutdown()`): path or package name',
    )
    .option('-c, --concurrency <n>', 'handlers running at once (default 10)', intOption('--concurrency', 1))
    .option('-q, --queue <name[,weight]>', 'queue to serve, repeatable (default: all queues)', parseQueue)
    .option(
      '--prefetch <n|auto>',
      'jobs claimed ahead, 0 for none (default auto: about 25 ms of work)',
      (value: string) => (value === 'auto' ? 'auto' : intOption('--prefetch')(value)),
    )
    .option('--lease-ms <ms>', 'lease of a claimed job (default 30000)', intOption('--lease-ms', 1))
    .option('--shutdown-timeout-ms <ms>', 'grace period on stop (default 10000)', intOption('--shutdown-timeout-ms'))
    .option('--name <name>', 'worker name shown in the workers table')
    .option('--crontab <file>', 'set the schedules of this crontab file at start (see docs/guide.md, Recurring jobs)')
    .action(async (options: Options, command: Command) => {
      const signal = new StopSignal();
      const module = await loadWorkerModule(options.require);
      const tusk = tuskFor(command);
      await module.setup?.(tusk);
      const workerOptions: WorkerOptions = module.tasks ? { tasks: module.tasks } : {};
      if (options.concurrency !== undefined) workerOptions.concurrency = options.concurrency;
      if (options.queue) workerOptions.queues = options.queue;
      if (options.prefetch !== undefined) workerOptions.prefetch = options.prefetch;
      if (options.leaseMs !== undefined) workerOptions.leaseMs = options.leaseMs;
      if (options.shutdownTimeoutMs !== undefined) workerOptions.shutdownTimeoutMs = options.shutdownTimeoutMs;
      if (options.name !== undefined) workerOptions.name = options.name;
      const close = async () => {
        await tusk.close();
        await module.shutdown?.();
      };
      try {
        // a mistake in the crontab stops the command before the worker claims anything
        const crontab = options.crontab === undefined ? undefined : await readCrontabFile(options.crontab);
        if (crontab) tusk.schedules.checkCrontab(crontab);
        if (!(await startPatiently(() => tusk.worker(workerOptions), 'the worker', urlSource(command), signal))) {
          await close(); // a signal while the database was out of reach
          process.exit();
        }
        if (options.crontab !== undefined) await syncCrontabFile(tusk, options.crontab, crontab);
      } catch (error) {
        await close();
        throw error;
      }
      await runUntilSignal('the worker', close, signal);
      // the worker has stopped: whatever the task module left open must not keep us alive
      process.exit();
    });
}
