import { describe, expect, it } from 'vitest';
import { loadWorkerModule } from '../../src/cli/commands/worker.js';

describe('tusk worker --require', () => {
  it('loads a file given with or without ./', async () => {
    for (const specifier of ['./test/fixtures/tasks.mjs', 'test/fixtures/tasks.mjs']) {
      const mod = await loadWorkerModule(specifier);
      expect(Object.keys(mod.tasks ?? {}).length).toBeGreaterThan(0);
    }
  });

  it('says which module it cannot find', async () => {
    await expect(loadWorkerModule('./nope/tasks.mjs')).rejects.toThrow(
      /cannot find the worker module \.\/nope\/tasks\.mjs: no file .*nope\/tasks\.mjs/,
    );
    await expect(loadWorkerModule('no-such-package-here')).rejects.toThrow(
      'cannot find the worker module no-such-package-here: not a file here nor an installed package',
    );
  });
});
