// A worker process for the fairness benchmark: `--strategy tusk` runs a real Tusk worker;
// `seed` and `fifo` run the same number of claim loops over a claim query without lanes or a plain
// global FIFO query, for comparison. Prints `ready` once it is claiming.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { FIFO_CLAIM, SEED_CLAIM } from '../lib/strategies.js';
import { Tusk } from '../lib/tusk.js';

const { values } = parseArgs({
  options: {
    strategy: { type: 'string' },
    schema: { type: 'string' },
    concurrency: { type: 'string', default: '16' },
  },
});
const url = process.env.DATABASE_URL as string;
const schema = values.schema as string;
const concurrency = Number(values.concurrency);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main() {
  let running = true;
  let stop: () => Promise<void>;
  if (values.strategy === 'tusk') {
    const tusk = new Tusk({ connectionString: url, schema, logger: false });
    const worker = tusk.worker({
      concurrency,
      shutdownTimeoutMs: 0,
      tasks: { work: (p: { ms: number }) => sleep(p.ms) },
    });
    await worker.start();
    stop = () => tusk.close();
  } else {
    const claim = values.strategy === 'seed' ? SEED_CLAIM(schema) : FIFO_CLAIM(schema);
    const pool = new pg.Pool({ connectionString: url, max: concurrency });
    const loop = async () => {
      while (running) {
        const { rows } = await pool.query<{ id: string; ms: number }>(
          `UPDATE "${schema}".jobs SET status = 'running', started_at = clock_timestamp()
           WHERE id = (${claim}) RETURNING id, (args->>'ms')::int AS ms`,
        );
        const job = rows[0];
        if (!job) {
          await sleep(10);
          continue;
        }
        await sleep(job.ms);
        await pool.query(
          `UPDATE "${schema}".jobs SET status = 'success', finished_at = clock_timestamp() WHERE id = $1`,
          [job.id],
        );
      }
    };
    const loops = Array.from({ length: concurrency }, () => loop().catch(() => {}));
    stop = async () => {
      running = false;
      await Promise.all(loops);
      await pool.end();
    };
  }
  process.on('SIGTERM', () => {
    running = false;
    stop().finally(() => process.exit(0));
  });
  console.log('ready');
}

await main();
