// A new ESM TypeScript app using the packed tusk-queue: compiled with strict tsc (no
// skipLibCheck, so the package's own .d.ts files are checked), then run against
// DATABASE_URL. Prints one line; exits non-zero on any failure.
import { createServer, defineTask, Tusk, TuskValidationError } from 'tusk-queue';

const add = defineTask('add', {
  handler: async (payload: { a: number; b: number }) => ({ sum: payload.a + payload.b }),
});
const schema = process.env.TUSK_SCHEMA ?? 'tusk_package_esm';
const tusk = new Tusk({ connectionString: process.env.DATABASE_URL, schema, tasks: [add], logger: false });

// compile-time checks: each line must stay an error (tsc fails on an unused @ts-expect-error)
export function neverCalled(): void {
  // @ts-expect-error a payload of the wrong type
  void tusk.enqueue('add', { a: 'two', b: 3 });
  // @ts-expect-error a task the list does not have
  void tusk.enqueue('substract', { a: 2, b: 3 });
}

try {
  await tusk.migrate();
  const { id } = await tusk.enqueue('add', { a: 2, b: 3 });
  const worker = tusk.worker({ tasks: [add], concurrency: 2 });
  await worker.start();
  let job = await tusk.getJob(id);
  for (let i = 0; job?.state !== 'succeeded'; i++) {
    if (i > 600 || job?.state === 'dead') throw new Error(`job ${id} did not succeed: ${JSON.stringify(job)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    job = await tusk.getJob(id);
  }
  await worker.stop();
  // typed: the result of an 'add' job is { sum: number }
  const sum: number | undefined = job.task === 'add' ? job.result?.sum : undefined;
  if (sum !== 5) throw new Error(`expected the sum 5, got ${sum}`);
  const refused = await tusk.untyped.enqueue('add', null, { delayMs: -1 }).catch((error: unknown) => error);
  if (!(refused instanceof TuskValidationError)) throw new Error('a negative delay was not refused');
  // the HTTP server, whose code the package loads on this first call
  const server = await createServer(tusk, { auth: 'none', dashboard: false, metrics: false });
  const health = await server.app.request('/api/health');
  await server.close();
  if (health.status !== 200) throw new Error(`GET /api/health answered ${health.status}`);
  console.log(
    `esm: job ${id} succeeded with ${JSON.stringify(job.result)}; bad input refused: ${refused.message}; /api/health ${health.status}`,
  );
} finally {
  await (await tusk.pool()).query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await tusk.close();
}
