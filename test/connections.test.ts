import { describe, expect, it } from 'vitest';
import { Tusk } from '../src/index.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const show = async (tusk: Tusk, setting: string) =>
  Object.values((await (await tusk.pool()).query(`SHOW ${setting}`)).rows[0] ?? {})[0];

describe('the connections Tusk opens', () => {
  // a plan estimated from a new schema's never analyzed tables (the tenants list, a cost
  // of millions for two rows) spent seconds compiling with JIT for a query of 1 ms
  it('run without JIT', async () => {
    expect(await show(db.tusk, 'jit')).toBe('off');
  });

  it("keep the URL's own startup options (JIT is turned off by a SET, not by replacing them)", async () => {
    const url = new URL(db.url);
    url.searchParams.set('options', '-c statement_timeout=12345');
    const tusk = new Tusk({ connectionString: url.toString(), schema: db.schema, logger: false });
    try {
      expect(await show(tusk, 'statement_timeout')).toBe('12345ms');
      expect(await show(tusk, 'jit')).toBe('off');
    } finally {
      await tusk.close();
    }
  });
});
