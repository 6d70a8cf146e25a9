import { readdirSync, readFileSync } from 'node:fs';

/** A numbered `.sql` file from the package's `sql/` folder. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

const SQL_DIR = new URL('../../sql/', import.meta.url);

/** All migrations shipped with this version of Tusk, in order. */
export function loadMigrations(): Migration[] {
  return readdirSync(SQL_DIR)
    .filter((file) => /^\d{6}_[\w-]+\.sql$/.test(file))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 6)),
      name: file.replace(/\.sql$/, ''),
      sql: readFileSync(new URL(file, SQL_DIR), 'utf8'),
    }));
}

/** The newest schema version this code knows. */
export const LATEST_VERSION: number = loadMigrations().at(-1)?.version ?? 0;

/**
 * The version of the baseline, `sql/000030_baseline.sql`: the migrations of the development
 * history before 0.1 were squashed into it. A schema at a lower version (above 0) was made
 * by a development build from before the squash, and no migration here leads from it.
 */
export const BASELINE_VERSION = 30;
