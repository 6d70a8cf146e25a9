// Worker processes of a chaos run: `tusk worker` started from the compiled CLI, each in a
// slot whose name its connections carry (application_name), restarted in place when killed.
import { type ChildProcess, spawn } from 'node:child_process';

const CLI = new URL('../dist/cli/main.js', import.meta.url).pathname;
const TASKS = new URL('./tasks.mjs', import.meta.url).pathname;

export interface FleetOptions {
  url: string;
  schema: string;
  concurrency: number;
  leaseMs: number;
  /** Extra `tusk worker` arguments. */
  args?: string[];
  /** The task module (default chaos/tasks.mjs). */
  tasks?: string;
  /** Prefix of the slot names (default `chaos-w`). */
  name?: string;
  /** Gets each line the workers print on stdout. */
  onLine?: (line: string, worker: WorkerProcess) => void;
}

export interface WorkerProcess {
  slot: number;
  pid: number;
  child: ChildProcess;
  startedAt: number;
  /** Set when we stopped or killed it; an exit without it is the worker giving up. */
  expectedExit: boolean;
  exitCode: number | null;
  exitSignal: NodeJS.Signals | null;
  exitedAt: number | null;
  /** Jobs whose outcome it reported as dropped (lease lost and re-claimed). */
  droppedOutcomes: number;
  /** Its last log lines, for a failure report. */
  log: string[];
}

export const slotName = (slot: number, prefix = 'chaos-w') => `${prefix}${slot}`;

/** A connection string whose connections are named after the slot (application_name). */
export function namedUrl(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

export class Fleet {
  readonly #o: FleetOptions;
  /** Every process ever started, by pid. */
  readonly all = new Map<number, WorkerProcess>();
  /** The live process of each slot. */
  readonly live = new Map<number, WorkerProcess>();

  constructor(options: FleetOptions) {
    this.#o = options;
  }

  /** The application_name of a slot's connections. */
  name(slot: number): string {
    return slotName(slot, this.#o.name);
  }

  start(slot: number): WorkerProcess {
    const url = namedUrl(this.#o.url, this.name(slot));
    const child = spawn(
      process.execPath,
      [
        CLI,
        'worker',
        '--require',
        this.#o.tasks ?? TASKS,
        '--concurrency',
        String(this.#o.concurrency),
        '--lease-ms',
        String(this.#o.leaseMs),
        '--name',
        this.name(slot),
        ...(this.#o.args ?? []),
      ],
      {
        env: {
          ...process.env,
          DATABASE_URL: url,
          CHAOS_RECORD_URL: this.#o.url,
          TUSK_SCHEMA: this.#o.schema,
          TUSK_LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', this.#o.onLine ? 'pipe' : 'ignore', 'pipe'],
      },
    );
    const w: WorkerProcess = {
      slot,
      pid: child.pid as number,
      child,
      startedAt: Date.now(),
      expectedExit: false,
      exitCode: null,
      exitSignal: null,
      exitedAt: null,
      droppedOutcomes: 0,
      log: [],
    };
    let partial = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        const dropped = /"jobs":(\d+),"outcome":"[a-z]+","msg":"outcomes dropped/.exec(line);
        if (dropped) w.droppedOutcomes += Number(dropped[1]);
        w.log.push(line);
        // enough for a crash's whole report (an uncaught error prints its fields one a line)
        if (w.log.length > 150) w.log.shift();
      }
    });
    const onLine = this.#o.onLine;
    if (onLine) {
      let rest = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        const lines = (rest + chunk.toString()).split('\n');
        rest = lines.pop() ?? '';
        for (const line of lines) onLine(line, w);
      });
    }
    child.on('exit', (code, signal) => {
      w.exitCode = code;
      w.exitSignal = signal;
      w.exitedAt = Date.now();
      if (this.live.get(slot) === w) this.live.delete(slot);
    });
    this.all.set(w.pid, w);
    this.live.set(slot, w);
    return w;
  }

  /** SIGKILLs a worker and waits for it to be gone. */
  async kill(w: WorkerProcess): Promise<void> {
    w.expectedExit = true;
    w.child.kill('SIGKILL');
    await exited(w);
  }

  /** Stops every live worker gracefully (SIGTERM); returns their exit codes. */
  async stopAll(timeoutMs = 60_000): Promise<Array<number | null>> {
    const workers = [...this.live.values()];
    // a process signalled before it set up its handlers would just die: let the young ones start
    const youngest = Math.max(0, ...workers.map((w) => w.startedAt));
    await new Promise((r) => setTimeout(r, Math.max(0, youngest + 2000 - Date.now())));
    for (const w of workers) {
      w.expectedExit = true;
      w.child.kill('SIGCONT');
      w.child.kill('SIGTERM');
    }
    const timer = setTimeout(() => {
      for (const w of workers) w.child.kill('SIGKILL');
    }, timeoutMs);
    await Promise.all(workers.map(exited));
    clearTimeout(timer);
    return workers.map((w) => w.exitCode);
  }

  /** Processes that exited while nobody asked them to. */
  unexpectedExits(): WorkerProcess[] {
    return [...this.all.values()].filter((w) => w.exitedAt !== null && !w.expectedExit);
  }
}

function exited(w: WorkerProcess): Promise<void> {
  if (w.exitedAt !== null) return Promise.resolve();
  return new Promise((resolve) => w.child.once('exit', () => resolve()));
}
