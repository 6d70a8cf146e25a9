import type { TestProject } from 'vitest/node';
import { startEmbedded } from '../../src/db/embedded.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

/**
 * Tests run against DATABASE_URL when set (CI sets the machine's server), else against
 * an embedded PostgreSQL in .tusk/test-pg, started once for all test files.
 */
export default async function setup(project: TestProject) {
  let url = process.env.DATABASE_URL;
  let stop = async () => {};
  if (!url) {
    const say = (_: object, msg?: string) => void (msg && console.log(`tests: ${msg}`));
    const server = await startEmbedded({ dir: '.tusk/test-pg' }, { debug() {}, info: say, warn: say, error: say });
    url = server.connectionString;
    stop = () => server.stop();
    console.log(`tests: no DATABASE_URL, using embedded PostgreSQL on port ${server.port}`);
  }
  project.provide('databaseUrl', url);
  return stop;
}
