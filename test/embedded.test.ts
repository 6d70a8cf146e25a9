import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Logger, Tusk } from '../src/index.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

function capture(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const log = (_: object, msg?: string) => void (msg && lines.push(msg));
  return { lines, debug: log, info: log, warn: log, error: log };
}

describe('zero-config start (no DATABASE_URL)', () => {
  it('starts an embedded PostgreSQL in a local folder, shares it, keeps its data, says so in one line', async () => {
    const saved = process.env.DATABASE_URL;
    delete process.env.DATABASE_URL;
    // the folder must be reachable by the postgres user when tests run as root
    const dir = await mkdtemp(join(tmpdir(), 'tusk-embedded-'));
    await chmod(dir, 0o755);
    dirs.push(dir);
    try {
      const log1 = capture();
      const first = new Tusk({ embedded: { dir }, logger: log1 });
      await first.migrate();
      const { id } = await first.enqueue('hello', { n: 1 });
      // as root, lines about the postgres user may come first (see embedded-root.test.ts)
      const own = log1.lines.filter((line) => !line.startsWith('embedded PostgreSQL: '));
      expect(own).toHaveLength(1);
      expect(own[0]).toMatch(/^no DATABASE_URL given: started embedded PostgreSQL in .* on 127\.0\.0\.1:\d+$/);

      // a second process finds it running and shares it
      const log2 = capture();
      const second = new Tusk({ embedded: { dir }, logger: log2 });
      expect((await second.getJob(id))?.payload).toEqual({ n: 1 });
      expect(log2.lines.at(-1)).toMatch(/using the running embedded PostgreSQL/);

      // the starter closes while another client is connected: the server stays up
      await first.close();
      expect(existsSync(join(dir, 'data', 'postmaster.pid'))).toBe(true);
      expect((await second.getJob(id))?.state).toBe('available');
      await second.close();

      // next time: started again, same data
      const third = new Tusk({ embedded: { dir }, logger: false });
      expect((await third.getJob(id))?.payload).toEqual({ n: 1 });
      await third.close();
      expect(existsSync(join(dir, 'data', 'postmaster.pid'))).toBe(false);
    } finally {
      if (saved !== undefined) process.env.DATABASE_URL = saved;
    }
  });
});
