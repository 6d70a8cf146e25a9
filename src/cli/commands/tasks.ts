import type { Command } from 'commander';
import type { RecordedDefinition } from '../../queries/taskDefinitions.js';
import { withTusk } from '../context.js';
import { renderTable } from '../table.js';

/** The recorded definitions as a table: one line a task. */
export function taskTable(tasks: RecordedDefinition[]): string {
  if (tasks.length === 0) return 'no task definitions recorded yet: a worker records its tasks when it starts';
  return renderTable(
    ['task', 'tenant', 'queue', 'attempts', 'backoff', 'timeout ms', 'payload schema', 'recorded by', 'recorded at'],
    tasks.map((t) => [
      t.task,
      t.tenant,
      t.queue,
      t.maxAttempts,
      t.backoff === null ? null : String(t.backoff),
      t.timeoutMs,
      t.payloadSchema ? 'JSON Schema' : t.schemaMissing ? `none: ${t.schemaMissing}` : null,
      t.recordedBy,
      t.recordedAt.toISOString(),
    ]),
  );
}

/** `tusk tasks`: the task definitions workers recorded. */
export function tasksCommand(program: Command): void {
  program
    .command('tasks')
    .description(
      'the task definitions workers recorded when they started (defaults, retry, time limit, payload schema): ' +
        'what `tusk enqueue`, the HTTP API and the SQL enqueue apply',
    )
    .option('--json', 'print JSON (with the payload JSON Schemas)')
    .action((options: { json?: boolean }, command: Command) =>
      withTusk(command, async (tusk) => {
        const tasks = await tusk.recordedTasks();
        console.log(options.json ? JSON.stringify(tasks, null, 2) : taskTable(tasks));
      }),
    );
}
