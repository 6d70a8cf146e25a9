import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cp, mkdir, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join, parse, resolve, sep } from 'node:path';
import { promisify } from 'node:util';
import { TuskError } from '../errors.js';
import type { Logger } from '../log.js';

const run = promisify(execFile);

/**
 * Running the embedded PostgreSQL as root. PostgreSQL refuses to run as root, so its
 * programs run as the `postgres` user, who must reach both the binaries and the data
 * folder. Neither is a given: a project under a root home (`/root`, mode 0700, the usual
 * place in a container) is out of its reach, `node_modules` included. So, as root:
 * binaries it cannot reach are copied once per version into a shared folder, and a data
 * folder it cannot reach is placed there too (said in the log). When even that fails,
 * the error names the folder and the ways out.
 */

/** The user and group the server's programs run as. */
export interface RunAs {
  uid: number;
  gid: number;
}

/** Where binaries and data go when the postgres user cannot reach them in place. */
export const sharedDir = (): string => resolve(process.env.TUSK_EMBEDDED_SHARED_DIR ?? '/var/lib/tusk-queue');

const FIXES =
  'set DATABASE_URL to use a PostgreSQL server of yours, or run as a normal user (not root), ' +
  'or set TUSK_EMBEDDED_SHARED_DIR to a folder every user can reach';

/**
 * The `postgres` user's ids, creating the user (a system account without a home) if
 * there is none. Creating a user changes the machine: it is said on standard error
 * whatever the app's logger, and in the log.
 */
export async function postgresAccount(log: Logger): Promise<RunAs> {
  const ids = async () => {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  try {
    return await ids();
  } catch {
    // no such user: created below
  }
  const message =
    'embedded PostgreSQL: running as root, and PostgreSQL refuses to run as root: creating the system user "postgres" ' +
    '(useradd --system --no-create-home postgres) to run it';
  console.error(`tusk: ${message}`);
  log.warn({ user: 'postgres' }, message);
  try {
    await run('groupadd', ['--system', 'postgres']).catch(() => {});
    await run('useradd', [
      '--system',
      '--gid',
      'postgres',
      '--no-create-home',
      '--shell',
      '/usr/sbin/nologin',
      'postgres',
    ]);
    return await ids();
  } catch (error) {
    throw new TuskError(
      `embedded PostgreSQL: running as root, there is no "postgres" user to run it as and creating one failed ` +
        `(${firstLine(error)}): create it (useradd --system postgres), or ${FIXES}`,
      { cause: error },
    );
  }
}

/** Whether `runAs` can run `test <flag> path` successfully (ACLs and group rights included). */
async function can(runAs: RunAs, flag: '-x' | '-w', path: string): Promise<boolean> {
  try {
    await run('/bin/sh', ['-c', `test ${flag} "$1"`, 'sh', path], { ...runAs, timeout: 10_000 });
    return true;
  } catch {
    return false;
  }
}

/** The first folder on the way to `path` that `runAs` cannot pass through, if any. */
async function blockedAt(runAs: RunAs, path: string): Promise<string | null> {
  const { root } = parse(path);
  const parts = path.slice(root.length).split(sep).filter(Boolean);
  let at = root;
  for (const part of ['', ...parts]) {
    at = part ? join(at, part) : at;
    if (!existsSync(at)) return null;
    if (!(await can(runAs, '-x', at))) return at;
  }
  return null;
}

interface Binaries {
  initdb: string;
  pg_ctl: string;
}

/**
 * Binaries the postgres user can run: those of the platform package if it can, else a
 * copy of them in the shared folder (made once per package version, owned by root and
 * readable by all).
 */
export async function reachableBinaries(bin: Binaries, runAs: RunAs, log: Logger): Promise<Binaries> {
  if (await runs(bin.pg_ctl, runAs)) return bin;
  const native = dirname(dirname(bin.pg_ctl));
  const pkg = JSON.parse(await readFile(join(native, '..', 'package.json'), 'utf8')) as {
    name: string;
    version: string;
  };
  const copy = join(sharedDir(), `postgres-${pkg.version}-${process.platform}-${process.arch}`);
  const copied = { initdb: join(copy, 'bin', 'initdb'), pg_ctl: join(copy, 'bin', 'pg_ctl') };
  if (!existsSync(copied.pg_ctl)) {
    const blocked = (await blockedAt(runAs, native)) ?? native;
    log.info(
      { from: native, to: copy },
      `embedded PostgreSQL: the postgres user cannot reach ${native} (${blocked} is closed to it): copying the binaries to ${copy}`,
    );
    try {
      await mkdir(sharedDir(), { recursive: true, mode: 0o755 });
      // copied aside, then renamed: a process starting at the same time never sees half a copy
      const partial = `${copy}.partial-${randomBytes(4).toString('hex')}`;
      await cp(native, partial, { recursive: true, verbatimSymlinks: true });
      await rename(partial, copy).catch(async (error: NodeJS.ErrnoException) => {
        await rm(partial, { recursive: true, force: true });
        if (!existsSync(copied.pg_ctl)) throw error;
      });
    } catch (error) {
      throw new TuskError(
        `embedded PostgreSQL: running as root, its binaries must be run as user "postgres", who cannot reach ` +
          `${native}, and copying them to ${copy} failed (${firstLine(error)}): ${FIXES}`,
        { cause: error },
      );
    }
  }
  if (!(await runs(copied.pg_ctl, runAs))) {
    const blocked = (await blockedAt(runAs, copy)) ?? copy;
    throw new TuskError(
      `embedded PostgreSQL: running as root, its binaries must be run as user "postgres", who cannot reach ` +
        `${native} nor the copy in ${copy} (${blocked} is closed to it): ${FIXES}`,
    );
  }
  return copied;
}

async function runs(pgCtl: string, runAs: RunAs): Promise<boolean> {
  try {
    await run(pgCtl, ['--version'], { ...runAs, timeout: 30_000 });
    return true;
  } catch {
    return false;
  }
}

/**
 * The data folder for the cluster of `dir`: `dir/data` if the postgres user can reach
 * `dir`, else a folder of its own in the shared folder (named after `dir`, so the same
 * project finds its cluster again), said in the log.
 */
export async function reachableDataDir(dir: string, runAs: RunAs, log: Logger): Promise<string> {
  const blocked = await blockedAt(runAs, dir);
  if (!blocked) return join(dir, 'data');
  const key = createHash('sha256').update(dir).digest('hex').slice(0, 12);
  const home = join(sharedDir(), 'clusters', `${basename(dir).replace(/[^\w.-]/g, '_')}-${key}`);
  try {
    await mkdir(home, { recursive: true, mode: 0o755 });
  } catch (error) {
    throw new TuskError(
      `embedded PostgreSQL: running as root, it runs as user "postgres", who cannot reach ${dir} ` +
        `(${blocked} is closed to it), and ${home} cannot be created (${firstLine(error)}): ${FIXES}`,
      { cause: error },
    );
  }
  const closed = await blockedAt(runAs, home);
  if (closed) {
    throw new TuskError(
      `embedded PostgreSQL: running as root, it runs as user "postgres", who cannot reach ${dir} ` +
        `(${blocked} is closed to it) nor ${home} (${closed} is closed to it): ${FIXES}`,
    );
  }
  const dataDir = join(home, 'data');
  log.info(
    { dir, dataDir },
    `embedded PostgreSQL: running as root, it runs as user "postgres", who cannot reach ${dir} ` +
      `(${blocked} is closed to it): its data lives in ${dataDir}`,
  );
  return dataDir;
}

function firstLine(error: unknown): string {
  const e = error as { stderr?: string; message?: string };
  return (e.stderr?.trim() || e.message || String(error)).split('\n')[0] ?? '';
}
