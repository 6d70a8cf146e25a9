// A long-running command's stop signal: taken whenever it comes, while the command starts,
// as it finishes starting, or while it waits for the database. Driven in a child process
// that signals itself at the chosen moment.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const LIFECYCLE = new URL('../dist/cli/lifecycle.js', import.meta.url).href;

/** Runs `body` in a child with StopSignal, startPatiently and runUntilSignal in scope. */
async function child(body: string) {
  const script = `
    import { StopSignal, runUntilSignal, startPatiently } from ${JSON.stringify(LIFECYCLE)};
    const signal = new StopSignal();
    const source = { url: 'postgres://nowhere', from: 'DATABASE_URL' };
    /** Resolves once the process has taken \`name\` (after StopSignal's own handler, added first). */
    const taken = (name) => new Promise((r) => process.once(name, r));
    setInterval(() => {}, 1000); // what a worker keeps open (signal listeners alone do not hold a process)
    ${body}
    process.exit(0);`;
  try {
    const { stdout, stderr } = await run(process.execPath, ['--input-type=module', '-e', script], {
      timeout: 20_000,
      killSignal: 'SIGKILL',
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; killed?: boolean; signal?: string; stdout?: string; stderr?: string };
    return { code: e.killed ? 'timed out' : (e.code ?? e.signal), stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

const thing = (start: string) => `() => ({
  async start() { ${start} },
  async stop() { console.log('stopped while starting'); },
})`;

describe('the stop signal of a long-running command', () => {
  it('a SIGTERM taken as the start ends stops the command (it was lost and the process ran on)', async () => {
    // the signal reaches the process inside start(); its JavaScript handler runs only
    // after start() resolved and the start-up phase ended
    for (let i = 0; i < 5; i++) {
      const r = await child(`
        const started = await startPatiently(${thing("process.kill(process.pid, 'SIGTERM');")}, 'the thing', source, signal);
        if (started) await runUntilSignal('the thing', async () => console.log('stopped'), signal);`);
      expect(r).toEqual({
        code: 0,
        stdout: 'stopped\n',
        stderr: 'tusk: SIGTERM: stopping the thing (again to force)\n',
      });
    }
  });

  it('a signal while it starts: what started is stopped, and the run phase is skipped', async () => {
    // start() ends only once the signal was taken: it came while the thing was starting
    const r = await child(`
      const started = await startPatiently(${thing("const got = taken('SIGINT'); process.kill(process.pid, 'SIGINT'); await got;")}, 'the thing', source, signal);
      console.log(started === null ? 'not started' : 'started');`);
    expect(r).toEqual({ code: 0, stdout: 'stopped while starting\nnot started\n', stderr: '' });
  });

  it('a signal while it waits for the database ends the wait at once', async () => {
    const r = await child(`
      let tries = 0;
      const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
      setTimeout(() => process.kill(process.pid, 'SIGTERM'), 200);
      const started = await startPatiently(${thing('tries++; throw refused();')}, 'the thing', source, signal);
      console.log(started === null ? 'not started after ' + tries : 'started');`);
    // without the signal the next try would come 500 ms after the first
    expect(r.stdout).toBe('not started after 1\n');
    expect(r.stderr).toMatch(/^tusk: the thing is waiting for the database: .*; retrying in 0\.5 s\n$/);
  });

  it('a second signal exits at once with 130', async () => {
    const r = await child(`
      process.kill(process.pid, 'SIGTERM');
      await runUntilSignal('the thing', async () => {
        process.kill(process.pid, 'SIGINT');
        await new Promise(() => {}); // a stop that never ends: only the second signal ends the process
      }, signal);`);
    expect(r).toEqual({
      code: 130,
      stdout: '',
      stderr: 'tusk: SIGTERM: stopping the thing (again to force)\ntusk: SIGINT again, exiting now\n',
    });
  });
});
