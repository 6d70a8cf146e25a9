// CommonJS on any Node 20: load tusk-queue (an ES module) with a dynamic import().
// Run against DATABASE_URL; prints one line.
'use strict';

async function main() {
  const { Tusk } = await import('tusk-queue');
  const schema = process.env.TUSK_SCHEMA ?? 'tusk_package_cjs_import';
  const tusk = new Tusk({ connectionString: process.env.DATABASE_URL, schema, logger: false });
  try {
    await tusk.migrate();
    const { id } = await tusk.enqueue('hello', { name: 'import' });
    const cancelled = await tusk.cancel(id);
    if (cancelled !== 'cancelled') throw new Error(`job ${id} is ${cancelled}`);
    console.log(`cjs (import): job ${id} ${cancelled}`);
  } finally {
    await (await tusk.pool()).query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await tusk.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
