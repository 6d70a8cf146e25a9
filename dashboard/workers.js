// @ts-check
import { api } from './api.js';
import { h, int, table, tablePage, time } from './dom.js';
/** @import { View, Worker } from './types.js' */

/**
 * Workers: alive or not, last heartbeat, jobs in hand.
 * @returns {View}
 */
export function workers() {
  const { el, body } = tablePage({
    title: 'Workers',
    sub: 'a dead worker’s jobs go back to the queue within a second',
  });

  async function refresh() {
    /** @type {{ workers: Worker[] }} */
    const { workers: list } = await api('api/workers');
    body.replaceChildren(
      table(
        [
          { label: 'Worker' },
          { label: 'Id', num: true },
          { label: 'Host' },
          { label: 'Queues' },
          { label: 'State' },
          { label: 'Last heartbeat' },
          { label: 'Jobs in hand', num: true },
          { label: 'Started' },
          { label: 'Version' },
        ],
        list.map((w) => [
          w.name,
          w.id,
          `${w.host} · pid ${w.pid}`,
          w.queues ? w.queues.join(', ') : 'all',
          h('span', { class: `badge ${w.alive ? 's-succeeded' : 's-dead'}` }, w.alive ? 'alive' : 'dead'),
          time(w.heartbeatAt),
          h(
            'span',
            null,
            `${int(w.jobs)} / ${int(w.concurrency)}`,
            h(
              'span',
              { class: 'bar' },
              h('span', { style: `width: ${Math.min(100, (100 * w.jobs) / Math.max(1, w.concurrency))}%` }),
            ),
          ),
          time(w.startedAt),
          w.version,
        ]),
        'No workers registered. Start one with `tusk worker --require ./tasks.js`.',
      ),
    );
  }

  return { el, refresh };
}
