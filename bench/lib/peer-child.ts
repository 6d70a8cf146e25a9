// The parent's side of bench/workers/peer-worker.ts: spawns it, follows its stdout lines,
// stops it and collects its final report.
import { spawnTs, stopAll } from './proc.js';

export interface DrainReport {
  done: number;
  ms: number;
  /** From the worker's start to its first job's start. */
  firstJobMs: number | null;
  /** Stopped by --max-ms before the target. */
  capped: boolean;
}

export interface FinalReport {
  done: number | null;
  ms: number | null;
  firstJobMs: number | null;
  capped: boolean;
  handled: number;
  rssPeakMb: number;
  /** Peak RSS before the system's library was loaded: node, tsx and pg. */
  rssBaseMb: number;
  errors: string[];
  latencies?: number[];
}

export interface PeerWorkerArgs {
  system: string;
  mode: 'defaults' | 'tuned';
  schema?: string;
  target?: number;
  maxMs?: number;
  latency?: boolean;
}

export interface PeerWorkerChild {
  ready: Promise<void>;
  /** Jobs handled so far, as last printed. */
  readonly handled: number;
  /** With a target: the drain's report. */
  drained: Promise<DrainReport>;
  /** SIGTERM, graceful stop, final report. */
  stop(): Promise<FinalReport>;
}

export function startPeerWorker(args: PeerWorkerArgs, url: string): PeerWorkerChild {
  const argv = ['--system', args.system, '--mode', args.mode];
  if (args.schema) argv.push('--schema', args.schema);
  if (args.target) argv.push('--target', String(args.target));
  if (args.maxMs) argv.push('--max-ms', String(Math.round(args.maxMs)));
  if (args.latency) argv.push('--latency');
  const child = spawnTs(new URL('../workers/peer-worker.ts', import.meta.url), argv, { DATABASE_URL: url });
  child.ready.catch(() => {});

  let handled = 0;
  let resolveDrained: (r: DrainReport) => void = () => {};
  let resolveFinal: (r: FinalReport) => void = () => {};
  const drained = new Promise<DrainReport>((resolve, reject) => {
    resolveDrained = resolve;
    child.once('exit', (code) => reject(new Error(`${args.system} worker exited (${code}) before it drained`)));
  });
  drained.catch(() => {});
  const final = new Promise<FinalReport>((resolve, reject) => {
    resolveFinal = resolve;
    child.once('exit', (code) => reject(new Error(`${args.system} worker exited (${code}) without a report`)));
  });
  final.catch(() => {});

  let buffer = '';
  child.stdout?.on('data', (d: Buffer) => {
    buffer += d.toString();
    let nl = buffer.indexOf('\n');
    while (nl >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      nl = buffer.indexOf('\n');
      if (line.startsWith('progress ')) handled = Number(line.slice(9));
      else if (line.startsWith('{')) {
        const event = JSON.parse(line) as { event: string } & DrainReport & FinalReport;
        if (event.event === 'drained') resolveDrained(event);
        else if (event.event === 'final') {
          handled = event.handled;
          resolveFinal(event);
        }
      }
    }
  });

  return {
    ready: child.ready,
    get handled() {
      return handled;
    },
    drained,
    async stop() {
      await stopAll([child]);
      return final;
    },
  };
}
