// @ts-check
import { api } from './api.js';
import { h, int, json, table, tablePage, time } from './dom.js';

/** @import { RecordedTask, View } from './types.js' */

/** @type {(value: string | null) => string | HTMLSpanElement} */
const orDefault = (value) => value ?? h('span', { class: 'muted' }, 'default');

/**
 * The schema column: the JSON Schema to unfold, or why there is none.
 * @param {RecordedTask} t
 */
function schemaCell(t) {
  if (t.payloadSchema) return h('details', null, h('summary', null, 'JSON Schema'), json(t.payloadSchema));
  if (t.schemaMissing) return h('span', { class: 'muted', title: t.schemaMissing }, 'not exported');
  return h('span', { class: 'muted' }, 'none');
}

/**
 * Tasks: the definitions workers recorded, which producers without the task list apply.
 * @returns {View}
 */
export function tasks() {
  const { el, body } = tablePage({
    title: 'Tasks',
    sub: 'as the last worker to start recorded them; enqueues from the CLI, HTTP and SQL apply them',
  });

  async function refresh() {
    /** @type {{ tasks: RecordedTask[] }} */
    const { tasks: list } = await api('api/tasks');
    body.replaceChildren(
      table(
        [
          { label: 'Task' },
          { label: 'Tenant' },
          { label: 'Queue' },
          { label: 'Attempts', num: true },
          { label: 'Backoff' },
          { label: 'Time limit' },
          { label: 'Payload schema' },
          { label: 'Recorded by' },
          { label: 'Recorded' },
        ],
        list.map((t) => [
          h('span', { 'data-task': t.task }, t.task),
          orDefault(t.tenant),
          orDefault(t.queue),
          t.maxAttempts === null ? orDefault(null) : int(t.maxAttempts),
          t.backoff === null ? 'exponential' : typeof t.backoff === 'number' ? `${int(t.backoff)} ms` : t.backoff,
          t.timeoutMs === null ? 'none' : `${int(t.timeoutMs / 1000)} s`,
          schemaCell(t),
          t.recordedBy,
          time(t.recordedAt),
        ]),
        'No task definitions recorded yet: a worker records its tasks when it starts.',
      ),
    );
  }

  return { el, refresh };
}
