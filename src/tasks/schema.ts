import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { JobRecord } from '../client/entries.js';
import { TuskValidationError } from '../errors.js';

/**
 * Validates `value` with a task's schema (any Standard Schema validator); resolves with
 * the schema's output. Throws TuskValidationError listing every issue, each with its path
 * under `field` (`payload.items[2].qty`). An exception of the schema itself (not a
 * validation failure) is thrown as it is.
 */
export async function validatePayload(
  schema: StandardSchemaV1,
  value: unknown,
  field: string,
  task: string,
): Promise<unknown> {
  const result = await schema['~standard'].validate(value);
  if (!result.issues) return result.value;
  const issues = result.issues.map((issue) => ({ path: pathOf(field, issue.path), message: issue.message }));
  const list = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
  throw new TuskValidationError(field, `does not match the schema of task ${JSON.stringify(task)}: ${list}`, issues);
}

/**
 * Validates a record's payload as the worker will see it: parsed back from the JSON it is
 * stored as (a Date is a string there), so that enqueue and worker never disagree.
 */
export function validateRecord(schema: StandardSchemaV1, record: JobRecord, field: string): Promise<unknown> {
  return validatePayload(schema, JSON.parse(record.payload), field, record.task);
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** `payload.items[2]["odd key"]` from a Standard Schema issue path. */
function pathOf(field: string, path: StandardSchemaV1.Issue['path']): string {
  let out = field;
  for (const segment of path ?? []) {
    const key = typeof segment === 'object' ? segment.key : segment;
    if (typeof key === 'number') out += `[${key}]`;
    else if (typeof key === 'string' && IDENTIFIER.test(key)) out += `.${key}`;
    else out += `[${JSON.stringify(String(key))}]`;
  }
  return out;
}
