// @ts-check
import { api } from './api.js';
import { badge, duration, flushPanel, h, int, page, route, STATE_LABELS, STATES, table, time } from './dom.js';

/** @import { Context, JobList, View } from './types.js' */

const PAGE = 50;
const RETRYABLE = ['dead', 'cancelled', 'expired', 'failed'];

/**
 * Job list: filters in the address (`#/jobs?state=dead&tenant=acme`), keyset paging.
 * @param {Context} context
 * @returns {View}
 */
export function jobs({ params, who, navigate, toast }) {
  /** @type {Record<'state' | 'tenant' | 'queue' | 'task', string>} */
  const filter = {
    state: params.get('state') ?? '',
    tenant: who.role === 'tenant' ? '' : (params.get('tenant') ?? ''),
    queue: params.get('queue') ?? '',
    task: params.get('task') ?? '',
  };
  /** @type {(name: 'tenant' | 'queue' | 'task', placeholder: string) => HTMLLabelElement} */
  const input = (name, placeholder) =>
    h(
      'label',
      null,
      name,
      h('input', { name, value: filter[name], placeholder, autocomplete: 'off', spellcheck: false }),
    );
  const form = h(
    'form',
    {
      class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        const data = new FormData(/** @type {HTMLFormElement} */ (event.currentTarget));
        navigate(route('jobs', Object.fromEntries([...data.entries()].map(([k, v]) => [k, String(v).trim()]))));
      },
    },
    h(
      'label',
      null,
      'state',
      h(
        'select',
        { name: 'state' },
        h('option', { value: '' }, 'any'),
        STATES.map((s) =>
          h(
            'option',
            { value: s, selected: s === filter.state },
            `${STATE_LABELS[s]}${STATE_LABELS[s] !== s ? ` (${s})` : ''}`,
          ),
        ),
      ),
    ),
    who.role === 'tenant' ? null : input('tenant', 'any'),
    input('queue', 'any'),
    input('task', 'any'),
    h('button', { class: 'primary', type: 'submit' }, 'Filter'),
    h('button', { type: 'button', onclick: () => navigate(route('jobs')) }, 'Clear'),
  );

  const body = h('div');
  const info = h('span');
  const newer = h('button', { type: 'button', disabled: true }, '← Newer');
  const older = h('button', { type: 'button', disabled: true }, 'Older →');
  const retryAll = RETRYABLE.includes(filter.state)
    ? h(
        'button',
        { type: 'button', class: 'small', onclick: retryMatching },
        `Retry all ${STATE_LABELS[filter.state]} jobs matching`,
      )
    : null;
  const el = page(
    { title: 'Jobs', sub: 'newest first', actions: retryAll },
    form,
    flushPanel(null, body, h('div', { class: 'pager' }, info, h('div', { class: 'buttons' }, newer, older))),
  );

  // keyset paging: the cursors of the pages before this one
  /** @type {(string | null)[]} */
  const cursors = [];
  /** @type {string | null} */
  let cursor = null;
  /** @type {string | null} */
  let next = null;
  newer.addEventListener('click', () => {
    cursor = cursors.pop() ?? null;
    refresh();
  });
  older.addEventListener('click', () => {
    cursors.push(cursor);
    cursor = next;
    refresh();
  });

  async function retryMatching() {
    if (!confirm(`Run again every ${STATE_LABELS[filter.state]} job matching these filters?`)) return;
    /** @type {{ retried: number }} */
    const { retried } = await api('api/jobs/retry', {
      method: 'POST',
      body: Object.fromEntries(Object.entries(filter).filter(([, v]) => v !== '')),
    });
    toast(`${int(retried)} job${retried === 1 ? '' : 's'} queued again`);
    refresh();
  }

  async function refresh() {
    const query = new URLSearchParams(Object.entries(filter).filter(([, v]) => v !== ''));
    query.set('limit', String(PAGE));
    if (cursor) query.set('cursor', cursor);
    /** @type {JobList} */
    const list = await api(`api/jobs?${query}`);
    next = list.nextCursor;
    newer.disabled = cursors.length === 0;
    older.disabled = next === null;
    const [first, last] = [list.jobs[0], list.jobs.at(-1)];
    info.textContent = first && last ? `page ${cursors.length + 1} · jobs ${last.id}–${first.id}` : '';
    body.replaceChildren(
      table(
        [
          { label: 'Id', num: true },
          { label: 'Task' },
          { label: 'Tenant' },
          { label: 'Queue' },
          { label: 'State' },
          { label: 'Attempts', num: true },
          { label: 'Created' },
          { label: 'Wait', num: true },
          { label: 'Run', num: true },
          { label: 'Last error', class: 'error-cell' },
        ],
        list.jobs.map((j) => [
          h('a', { href: route(`jobs/${j.id}`), class: 'mono' }, j.id),
          j.task,
          j.tenant,
          j.queue,
          badge(j.state),
          `${j.attempts}/${j.maxAttempts}`,
          time(j.createdAt),
          duration(j.waitMs),
          duration(j.runMs),
          j.error ? h('span', { title: j.error }, j.error) : '',
        ]),
        'No jobs match.',
      ),
    );
  }

  return { el, refresh };
}
