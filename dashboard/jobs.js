// @ts-check
import { api } from './api.js';
import {
  badge,
  duration,
  flushPanel,
  h,
  int,
  page,
  route,
  STATE_LABELS,
  STATES,
  table,
  time,
  utcOffset,
  ZONE,
} from './dom.js';

/** @import { Context, JobList, JobSummary, RecordedTask, Stats, View } from './types.js' */

const PAGE = 50;
const RETRYABLE = ['dead', 'cancelled', 'expired', 'failed'];
const CANCELLABLE = ['scheduled', 'available', 'running', 'failed'];

/** @typedef {'state' | 'tenant' | 'queue' | 'task' | 'from' | 'to'} FilterName */

/**
 * An instant as a datetime-local input holds it: the browser's local time, to the minute.
 * @param {string} iso
 */
function localInput(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (/** @type {number} */ n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/**
 * A datetime-local input's value (local time) as an instant; '' stays ''.
 * @param {string} value
 */
const instant = (value) => (value ? new Date(value).toISOString() : '');

/**
 * @param {number} n
 * @param {string} one
 */
const plural = (n, one) => `${int(n)} ${one}${n === 1 ? '' : 's'}`;

/**
 * Job list: structured filters in the address (`#/jobs?state=dead&tenant=acme&from=…`),
 * keyset paging, rows selected to retry, cancel or delete together.
 * @param {Context} context
 * @returns {View}
 */
export function jobs({ params, who, navigate, toast }) {
  /** @type {Record<FilterName, string>} */
  const filter = {
    state: params.get('state') ?? '',
    tenant: who.role === 'tenant' ? '' : (params.get('tenant') ?? ''),
    queue: params.get('queue') ?? '',
    task: params.get('task') ?? '',
    from: params.get('from') ?? '',
    to: params.get('to') ?? '',
  };
  // the names a filter may take, as datalists: what the stats and the recorded tasks know
  const known = {
    tenant: h('datalist', { id: 'known-tenants' }),
    queue: h('datalist', { id: 'known-queues' }),
    task: h('datalist', { id: 'known-tasks' }),
  };
  /** @type {(name: 'tenant' | 'queue' | 'task') => HTMLLabelElement} */
  const named = (name) =>
    h(
      'label',
      null,
      name,
      h('input', {
        name,
        value: filter[name],
        placeholder: 'any',
        list: known[name].id,
        autocomplete: 'off',
        spellcheck: false,
      }),
    );
  const offset = utcOffset(new Date());
  /** @type {(name: 'from' | 'to', label: string) => HTMLLabelElement} */
  const when = (name, label) =>
    h(
      'label',
      { title: `local time, ${ZONE}` },
      `${label} (${offset})`,
      h('input', { name, type: 'datetime-local', value: filter[name] ? localInput(filter[name]) : '' }),
    );
  const form = h(
    'form',
    {
      class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        const data = new FormData(/** @type {HTMLFormElement} */ (event.currentTarget));
        /** @type {Record<string, string>} */
        const next = {};
        for (const [k, v] of data.entries()) next[k] = String(v).trim();
        next.from = instant(next.from ?? '');
        next.to = instant(next.to ?? '');
        navigate(route('jobs', next));
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
    who.role === 'tenant' ? null : named('tenant'),
    named('queue'),
    named('task'),
    when('from', 'created from'),
    when('to', 'to'),
    h('button', { class: 'primary', type: 'submit' }, 'Filter'),
    h('button', { type: 'button', onclick: () => navigate(route('jobs')) }, 'Clear'),
    Object.values(known),
  );

  /** @type {Set<string>} the selected jobs, on this page */
  const selected = new Set();
  /** @type {JobSummary[]} */
  let rows = [];
  const count = h('span', { class: 'muted' });
  const retrySelected = h('button', { type: 'button', class: 'small', onclick: () => bulk('retry') }, 'Retry selected');
  const cancelSelected = h(
    'button',
    { type: 'button', class: 'small danger', onclick: () => bulk('cancel') },
    'Cancel selected',
  );
  const deleteSelected = h(
    'button',
    { type: 'button', class: 'small danger', onclick: () => removeSelected() },
    'Delete selected',
  );
  const bulkBar = h(
    'div',
    { class: 'bulk' },
    count,
    retrySelected,
    cancelSelected,
    deleteSelected,
    h(
      'button',
      {
        type: 'button',
        class: 'small link',
        onclick: clearSelection,
      },
      'Clear selection',
    ),
  );

  const body = h('div');
  const info = h('span');
  const newer = h('button', { type: 'button', disabled: true }, '← Newer');
  const older = h('button', { type: 'button', disabled: true }, 'Older →');
  // retryAll takes state, task, tenant and queue: offered when no time range narrows the list
  const retryAll =
    RETRYABLE.includes(filter.state) && !filter.from && !filter.to
      ? h(
          'button',
          { type: 'button', class: 'small', onclick: retryMatching },
          `Retry all ${STATE_LABELS[filter.state]} jobs matching`,
        )
      : null;
  const el = page(
    { title: 'Jobs', sub: 'newest first', actions: retryAll },
    form,
    flushPanel(null, bulkBar, body, h('div', { class: 'pager' }, info, h('div', { class: 'buttons' }, newer, older))),
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
    clearSelection();
    refresh();
  });
  older.addEventListener('click', () => {
    cursors.push(cursor);
    cursor = next;
    clearSelection();
    refresh();
  });

  async function retryMatching() {
    if (!confirm(`Run again every ${STATE_LABELS[filter.state]} job matching these filters?`)) return;
    /** @type {{ retried: number }} */
    const { retried } = await api('api/jobs/retry', {
      method: 'POST',
      body: Object.fromEntries(Object.entries(filter).filter(([k, v]) => v !== '' && k !== 'from' && k !== 'to')),
    });
    toast(`${plural(retried, 'job')} queued again`);
    refresh();
  }

  /**
   * Retries or cancels the selected jobs, each in a state that allows it.
   * @param {'retry' | 'cancel'} action
   */
  async function bulk(action) {
    const allowed = action === 'retry' ? RETRYABLE : CANCELLABLE;
    const targets = rows.filter((j) => selected.has(j.id) && allowed.includes(j.state));
    const skipped = selected.size - targets.length;
    if (targets.length === 0) return;
    if (action === 'cancel' && !confirm(`Cancel ${plural(targets.length, 'job')}?`)) return;
    const results = await Promise.allSettled(
      targets.map(
        (j) =>
          /** @type {Promise<{ state: string }>} */ (
            api(`api/jobs/${encodeURIComponent(j.id)}/${action}`, { method: 'POST' })
          ),
      ),
    );
    const states = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.state] : []));
    const failed = results.length - states.length;
    const stopping = states.filter((s) => s === 'running').length;
    const parts = [
      action === 'retry'
        ? `${plural(states.length, 'job')} queued again`
        : `${plural(states.length - stopping, 'job')} cancelled`,
      stopping ? `${int(stopping)} running, asked to stop` : '',
      skipped ? `${int(skipped)} left as ${action === 'retry' ? 'not retryable' : 'not cancellable'} in its state` : '',
      failed ? `${int(failed)} failed` : '',
    ];
    toast(parts.filter(Boolean).join('; '), failed > 0);
    clearSelection();
    await refresh();
  }

  /** Deletes the selected jobs that are not running, with their records. */
  async function removeSelected() {
    const targets = rows.filter((j) => selected.has(j.id) && j.state !== 'running');
    // counted now: a refresh while the deletes run drops the deleted jobs from the selection
    const running = selected.size - targets.length;
    if (targets.length === 0) return;
    if (!confirm(`Delete ${plural(targets.length, 'job')} and their records? This cannot be undone.`)) return;
    const results = await Promise.allSettled(
      targets.map((j) => api(`api/jobs/${encodeURIComponent(j.id)}`, { method: 'DELETE' })),
    );
    const failed = results.filter((r) => r.status === 'rejected').length;
    const parts = [
      `${plural(results.length - failed, 'job')} deleted`,
      running ? `${int(running)} running, left (cancel them)` : '',
      failed ? `${int(failed)} not deleted (others depend on them, or they started meanwhile)` : '',
    ];
    toast(parts.filter(Boolean).join('; '), failed > 0);
    clearSelection();
    await refresh();
  }

  /** The bulk bar says what is selected and what it may do. */
  function updateBulk() {
    const chosen = rows.filter((j) => selected.has(j.id));
    count.textContent = chosen.length
      ? `${plural(chosen.length, 'job')} selected`
      : 'Select jobs to retry, cancel or delete them together';
    retrySelected.disabled = !chosen.some((j) => RETRYABLE.includes(j.state));
    cancelSelected.disabled = !chosen.some((j) => CANCELLABLE.includes(j.state));
    deleteSelected.disabled = !chosen.some((j) => j.state !== 'running');
  }

  /**
   * Empties the selection and shows it at once: the rows stay until the next refresh
   * returns, and a box left checked meanwhile would read as selected (a click on it then
   * unchecked it, and the job was left out of the next action).
   */
  function clearSelection() {
    selected.clear();
    render();
  }

  /**
   * @param {string} id
   * @param {boolean} on
   */
  function select(id, on) {
    if (on) selected.add(id);
    else selected.delete(id);
    for (const box of body.querySelectorAll('input[data-all]')) {
      /** @type {HTMLInputElement} */ (box).checked = rows.length > 0 && rows.every((j) => selected.has(j.id));
    }
    updateBulk();
  }

  function render() {
    const all = h('input', {
      type: 'checkbox',
      'aria-label': 'select every job on this page',
      dataset: { all: '' },
      checked: rows.length > 0 && rows.every((j) => selected.has(j.id)),
      onchange: () => {
        const on = all.checked; // read once: select() sets this box as the rows stand
        for (const j of rows) select(j.id, on);
        for (const box of body.querySelectorAll('input[data-job]')) {
          /** @type {HTMLInputElement} */ (box).checked = on;
        }
      },
    });
    body.replaceChildren(
      table(
        [
          { label: all, class: 'pick' },
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
        rows.map((j) => [
          h('input', {
            type: 'checkbox',
            'aria-label': `select job ${j.id}`,
            dataset: { job: j.id },
            checked: selected.has(j.id),
            onchange: (/** @type {Event} */ event) =>
              select(j.id, /** @type {HTMLInputElement} */ (event.currentTarget).checked),
          }),
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
    updateBulk();
  }

  /** Fills the filters' datalists once, for an admin (the only one who may read the stats). */
  async function loadKnown() {
    if (who.role !== 'admin') return;
    /** @type {[Stats, { tasks: RecordedTask[] }]} */
    const [stats, recorded] = await Promise.all([api('api/stats'), api('api/tasks')]);
    /** @type {(list: HTMLDataListElement, names: string[]) => void} */
    const fill = (list, names) =>
      list.replaceChildren(...[...new Set(names)].sort().map((value) => h('option', { value })));
    fill(
      known.tenant,
      stats.tenants.map((t) => t.tenant),
    );
    fill(
      known.queue,
      stats.queues.map((q) => q.queue),
    );
    fill(known.task, [...stats.tasks.map((t) => t.task), ...recorded.tasks.map((t) => t.task)]);
  }

  let refreshes = 0;
  let knownLoaded = false;

  async function refresh() {
    const call = ++refreshes;
    if (!knownLoaded) {
      knownLoaded = true;
      await loadKnown();
    }
    const query = new URLSearchParams(Object.entries(filter).filter(([, v]) => v !== ''));
    query.set('limit', String(PAGE));
    if (cursor) query.set('cursor', cursor);
    /** @type {JobList} */
    const list = await api(`api/jobs?${query}`);
    // a refresh started since (the one after an action) has newer data
    if (call !== refreshes) return;
    rows = list.jobs;
    for (const id of selected) if (!rows.some((j) => j.id === id)) selected.delete(id);
    next = list.nextCursor;
    newer.disabled = cursors.length === 0;
    older.disabled = next === null;
    const [first, last] = [rows[0], rows.at(-1)];
    info.textContent = first && last ? `page ${cursors.length + 1} · jobs ${last.id}–${first.id}` : '';
    render();
  }

  return { el, refresh };
}
