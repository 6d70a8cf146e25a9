import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/cli.mjs', import.meta.url));

/** Runs a bench TypeScript file in its own Node process (via tsx); it prints `ready` when up. */
export function spawnTs(
  file: URL,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): ChildProcess & { ready: Promise<void> } {
  const child = spawn(process.execPath, [TSX, fileURLToPath(file), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  }) as ChildProcess & { ready: Promise<void> };
  child.ready = new Promise((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`${file.pathname} exited with ${code} before it was ready`)));
  });
  return child;
}

/** Stops child processes and waits for them to exit. */
export async function stopAll(children: ChildProcess[], signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  await Promise.all(
    children.map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          c.once('exit', () => resolve());
          c.kill(signal);
          setTimeout(() => c.kill('SIGKILL'), 15_000).unref();
        }),
    ),
  );
}
