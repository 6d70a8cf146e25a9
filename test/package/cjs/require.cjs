// CommonJS with require(): tusk-queue is an ES module, which Node loads with require() from
// 20.19 and 22.12 on (require(esm)). Run against DATABASE_URL; prints one line.
'use strict';

const { Tusk } = require('tusk-queue');

async function main() {
  const schema = process.env.TUSK_SCHEMA ?? 'tusk_package_cjs';
  const tusk = new Tusk({ connectionString: process.env.DATABASE_URL, schema, logger: false });
  try {
    await tusk.migrate();
    const { id } = await tusk.enqueue('hello', { name: 'cjs' });
    const [leased] = await tusk.fetch({ count: 1 });
    if (!leased || leased.id !== id) throw new Error(`expected to lease job ${id}, got ${JSON.stringify(leased)}`);
    await tusk.ack(leased, `hello ${leased.payload.name}`);
    const job = await tusk.getJob(id);
    if (job?.state !== 'succeeded') throw new Error(`job ${id} is ${job?.state}`);
    console.log(`cjs (require): job ${id} ${job.state} with ${JSON.stringify(job.result)}`);
  } finally {
    await (await tusk.pool()).query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await tusk.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
