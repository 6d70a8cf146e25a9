import { TuskValidationError } from '../errors.js';

const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Checks a schema name: a plain SQL identifier, so it is safe in every statement. */
export function validateSchemaName(name: string, field = 'schema'): string {
  if (typeof name !== 'string' || !SCHEMA_NAME.test(name)) {
    throw new TuskValidationError(
      field,
      `must be 1-63 letters, digits or underscores, not starting with a digit (got ${JSON.stringify(name)})`,
    );
  }
  return name;
}

/** `name` as a quoted SQL identifier. */
export const ident = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** `text` as a SQL string literal. */
export const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;

/** The NOTIFY channels of a schema. */
export const channels = (schema: string) => ({
  jobs: `${schema}:jobs`,
  cancel: `${schema}:cancel`,
  done: `${schema}:done`,
  progress: `${schema}:progress`,
});
