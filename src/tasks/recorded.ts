import type { StandardJSONSchemaV1, StandardSchemaV1 } from '@standard-schema/spec';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule, { type FormatsPlugin } from 'ajv-formats';
import type { RecordedDefinition } from '../queries/taskDefinitions.js';
import type { TaskDefinition } from './definition.js';

// ajv-formats is CommonJS: its plugin is the default export's default under NodeNext
const addFormats = (addFormatsModule as unknown as { default: FormatsPlugin }).default;

type Row = Omit<RecordedDefinition, 'recordedAt'>;

/**
 * The rows a worker records for its tasks: defaults, retry policy, time limit, and the
 * payload's JSON Schema where the task's validator exports one (zod 4 does, as do other
 * validators implementing Standard JSON Schema). A schema ajv cannot compile is left out,
 * with the reason, rather than refusing every payload.
 */
export function definitionRows(
  tasks: ReadonlyMap<string, TaskDefinition>,
  recordedBy: string,
  defaultTimeoutMs: number,
): Row[] {
  return [...tasks].map(([task, d]) => {
    const { payloadSchema, schemaMissing } = exportSchema(d.schema);
    const backoff = d.retry?.backoff;
    return {
      task,
      tenant: d.tenant ?? null,
      queue: d.queue ?? null,
      maxAttempts: d.retry?.maxAttempts ?? null,
      backoff: typeof backoff === 'function' ? 'function' : (backoff ?? null),
      retryQueue: d.retry?.queue ?? null,
      timeoutMs: d.timeoutMs === undefined ? defaultTimeoutMs : d.timeoutMs,
      isolated: d.isolate !== undefined,
      payloadSchema,
      schemaMissing,
      recordedBy,
    };
  });
}

function exportSchema(schema: StandardSchemaV1 | undefined): Pick<Row, 'payloadSchema' | 'schemaMissing'> {
  if (!schema) return { payloadSchema: null, schemaMissing: null };
  const converter = (schema['~standard'] as Partial<StandardJSONSchemaV1.Props>).jsonSchema;
  const vendor = schema['~standard'].vendor;
  if (!converter) {
    return { payloadSchema: null, schemaMissing: `its ${vendor} schema exports no JSON Schema (Standard JSON Schema)` };
  }
  try {
    const payloadSchema = converter.input({ target: 'draft-2020-12' });
    compile(payloadSchema);
    return { payloadSchema, schemaMissing: null };
  } catch (error) {
    return {
      payloadSchema: null,
      schemaMissing: `its ${vendor} schema has no JSON Schema: ${(error as Error).message}`,
    };
  }
}

const ajv = new Ajv2020({ allErrors: true, strict: false, logger: false });
addFormats(ajv);
// by text: definitions are read again every few seconds as new objects, and ajv keeps every
// schema object it compiled; its top-level $id is dropped, as a changed schema keeps it
const compiled = new Map<string, ValidateFunction>();

function compile(schema: Record<string, unknown>): ValidateFunction {
  const { $id: _id, ...anonymous } = schema;
  const text = JSON.stringify(anonymous);
  let validate = compiled.get(text);
  if (!validate) {
    validate = ajv.compile(anonymous);
    compiled.set(text, validate);
  }
  return validate;
}

/**
 * A recorded JSON Schema as a Standard Schema validator, so that producers check payloads
 * by it exactly as by the task's own schema (same error, same paths).
 */
export function jsonSchemaValidator(schema: Record<string, unknown>): StandardSchemaV1 {
  const validate = compile(schema);
  return {
    '~standard': {
      version: 1,
      vendor: 'tusk (recorded JSON Schema)',
      validate: (value) => (validate(value) ? { value } : { issues: issuesOf(validate.errors ?? []) }),
    },
  };
}

/**
 * ajv's errors as issues. A string format comes with its pattern (zod exports both): the
 * pattern's failure at a path whose format failed says nothing more and is left out.
 */
function issuesOf(errors: ErrorObject[]): StandardSchemaV1.Issue[] {
  const formats = new Set(errors.filter((e) => e.keyword === 'format').map((e) => e.instancePath));
  return errors.filter((e) => !(e.keyword === 'pattern' && formats.has(e.instancePath))).map(toIssue);
}

/** An ajv error as a Standard Schema issue: the path of the value it is about, a message. */
function toIssue(e: ErrorObject): StandardSchemaV1.Issue {
  const path: PropertyKey[] = e.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'))
    .map((s) => (/^(0|[1-9]\d*)$/.test(s) ? Number(s) : s));
  if (e.keyword === 'required') return { path: [...path, e.params.missingProperty], message: 'is required' };
  if (e.keyword === 'additionalProperties') {
    return { path: [...path, e.params.additionalProperty], message: 'is not allowed' };
  }
  return { path, message: e.message ?? `fails ${e.keyword}` };
}

/**
 * Recorded definitions as producers apply them, read at most once every `maxAgeMs`: a
 * service that enqueues without the task list sees a worker's new definitions that soon.
 */
export class RecordedTasks {
  #read: Promise<ReadonlyMap<string, TaskDefinition>> | undefined;
  #readAt = 0;

  constructor(
    private readonly load: () => Promise<RecordedDefinition[]>,
    private readonly maxAgeMs = 5_000,
  ) {}

  /** Task name → what a producer applies of its recorded definition. */
  definitions(): Promise<ReadonlyMap<string, TaskDefinition>> {
    if (!this.#read || performance.now() - this.#readAt > this.maxAgeMs) {
      this.#readAt = performance.now();
      const read = this.load().then((rows) => new Map(rows.map((r) => [r.task, asDefinition(r)])));
      // a failed read is not kept: the next enqueue reads again
      read.catch(() => {
        if (this.#read === read) this.#read = undefined;
      });
      this.#read = read;
    }
    return this.#read;
  }
}

/** What a producer applies of a recorded definition. */
function asDefinition(r: RecordedDefinition): TaskDefinition {
  return {
    ...(r.tenant !== null && { tenant: r.tenant }),
    ...(r.queue !== null && { queue: r.queue }),
    ...(r.maxAttempts !== null && { retry: { maxAttempts: r.maxAttempts } }),
    ...(r.payloadSchema !== null && { schema: jsonSchemaValidator(r.payloadSchema) }),
  };
}
