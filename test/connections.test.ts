import { describe, expect, it } from 'vitest';
import { Tusk } from '../src/index.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const jit = async (tusk: Tusk) => (await (await tusk.pool()).query<{ jit: string }>('SHOW jit')).rows[0]?.jit;

describe('the connections Tusk opens', () => {
  // a plan estimated from a new schema's never analyzed tables (the tenants list, a cost
  // of millions for two rows) spent seconds compiling with JIT for a query of 1 ms
  it('run without JIT', async () => {
    expect(await jit(db.tusk)).toBe('off');
  });

  it('unless the URL says otherwise', async () => {
    const url = new URL(db.url);
    url.searchParams.set('options', '-c jit=on');
    const tusk = new Tusk({ connectionString: url.toString(), schema: db.schema, logger: false });
    try {
      expect(await jit(tusk)).toBe('on');
    } finally {
      await tusk.close();
    }
  });
});
