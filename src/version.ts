import { readFileSync } from 'node:fs';

/** The installed Tusk version, recorded in the workers and migrations tables. */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
