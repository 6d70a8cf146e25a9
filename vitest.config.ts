import { defineConfig } from 'vitest/config';
import FaultsLast from './test/setup/sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // PostgreSQL shares the machine's two cores with the tests: two files at a time
    maxWorkers: 2,
    sequence: { sequencer: FaultsLast },
    // the usual report, then the tests skipped for a missing service and why
    reporters: ['default', './test/setup/skips.ts'],
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
