import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EnqueueOptions, FlowSpec, Job, JobSpec } from '../types.js';
import { nameSchema, parse } from '../validation/validate.js';
import { definitionSchema, type Handler, type NamedTask, type TaskDefinition } from './definition.js';

/**
 * A task made by `defineTask`: its definition and its name, and, for TypeScript, the
 * payload `enqueue` takes and the result its handler returns.
 */
export interface DefinedTask<Name extends string = string, Payload = unknown, Result = unknown> extends NamedTask {
  readonly name: Name;
  /** Types only, never set: what enqueue takes, what the handler returns. */
  readonly '~types'?: { readonly payload: Payload; readonly result: Result };
}

/** What a task definition holds besides its handler and schema. */
type Settings = Omit<TaskDefinition, 'handler' | 'schema'>;

/**
 * Defines a task for a typed registry: give the list to `new Tusk({ tasks: [...] })` and
 * `enqueue` checks task names and payloads at compile time. The payload type comes from
 * the `schema` (zod, or any Standard Schema validator: its input type at enqueue, its
 * output type in the handler) or else from the handler's parameter.
 *
 * @example
 * const sendEmail = defineTask('send_email', {
 *   schema: z.object({ to: z.email(), subject: z.string() }),
 *   handler: async ({ to, subject }, ctx) => ({ messageId: await mail(to, subject, ctx.signal) }),
 *   queue: 'mail',
 * });
 * const tusk = new Tusk({ tasks: [sendEmail] });
 * await tusk.enqueue('send_email', { to: 'a@example.com', subject: 'Hi' }); // checked
 */
export function defineTask<const Name extends string, Schema extends StandardSchemaV1, Result = unknown>(
  name: Name,
  definition: Settings & { schema: Schema; handler?: Handler<StandardSchemaV1.InferOutput<Schema>, Result> },
): DefinedTask<Name, StandardSchemaV1.InferInput<Schema>, Result>;
export function defineTask<const Name extends string, Payload = unknown, Result = unknown>(
  name: Name,
  definition: Settings & { schema?: undefined; handler?: Handler<Payload, Result> },
): DefinedTask<Name, Payload, Result>;
export function defineTask(name: string, definition: TaskDefinition): DefinedTask {
  parse(nameSchema(200), name, 'name');
  parse(definitionSchema, definition, 'definition');
  return { ...definition, name };
}

/** A list of tasks made by `defineTask`. `TaskList` itself stands for any name, any payload. */
export type TaskList = readonly DefinedTask[];

/** The task names of a list. */
export type TaskName<L extends TaskList> = L[number]['name'];

/** The payload `enqueue` takes for task `N` of a list (`unknown` for an untyped list). */
export type TaskPayload<L extends TaskList, N extends string> = L[number] extends infer D
  ? D extends DefinedTask<infer Name, infer Payload>
    ? N extends Name
      ? Payload
      : never
    : never
  : never;

/** What task `N`'s handler returns (`unknown` for an untyped list). */
export type TaskResult<L extends TaskList, N extends string> = L[number] extends infer D
  ? D extends DefinedTask<infer Name, unknown, infer Result>
    ? N extends Name
      ? Result
      : never
    : never
  : never;

/**
 * A job of a typed instance: a union by task name, each with its task's payload and
 * result types, so checking `job.task` narrows them. For an untyped list, `Job`.
 *
 * @example
 * const job = await tusk.getJob(id);
 * if (job?.task === 'send_email') console.log(job.payload.to, job.result?.messageId);
 */
export type TypedJob<L extends TaskList> =
  string extends TaskName<L>
    ? Job
    : { [N in TaskName<L>]: Job<TaskPayload<L, N>, TaskResult<L, N>> & { task: N } }[TaskName<L>];

/**
 * The arguments after the task name: the payload may be left out when it may be
 * undefined (`never`, a name TypeScript refused already, takes anything).
 */
export type EnqueueArgs<Payload> = [Payload] extends [never]
  ? [payload?: unknown, options?: EnqueueOptions]
  : undefined extends Payload
    ? [payload?: Payload, options?: EnqueueOptions]
    : [payload: Payload, options?: EnqueueOptions];

type PayloadField<Payload> = undefined extends Payload ? { payload?: Payload } : { payload: Payload };

/** An entry of `enqueueMany` for a task of the list, with its payload's type. */
export type TypedJobSpec<L extends TaskList> = {
  [N in TaskName<L>]: Omit<JobSpec, 'task' | 'payload'> & { task: N } & PayloadField<TaskPayload<L, N>>;
}[TaskName<L>];

/** A job of a flow (`tusk.flow`) for a task of the list, with its payload's type, and its children. */
export type TypedFlowSpec<L extends TaskList> = {
  [N in TaskName<L>]: Omit<FlowSpec, 'task' | 'payload' | 'children'> & {
    task: N;
    children?: ReadonlyArray<TypedFlowSpec<L>>;
  } & PayloadField<TaskPayload<L, N>>;
}[TaskName<L>];
