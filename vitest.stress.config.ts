import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

/**
 * `npm run stress`: the races of test/**\/*.stress.ts, each forced many times over. Slow
 * (minutes), so outside `npm test`; one file at a time, so that the races are not timed by
 * another file's load.
 */
export default defineConfig({
  test: {
    ...base.test,
    include: ['test/**/*.stress.ts'],
    testTimeout: 900_000,
    maxWorkers: 1,
    typecheck: { enabled: false },
  },
});
