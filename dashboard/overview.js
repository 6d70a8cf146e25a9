// @ts-check
import { api } from './api.js';
import { timeChart } from './charts.js';
import {
  badge,
  dateTime,
  duration,
  flushPanel,
  h,
  int,
  page,
  panel,
  route,
  STATES,
  table,
  utcOffset,
  ZONE,
} from './dom.js';

/** @import { Context, Counts, JobState, PausedQueues, Stats, Timeseries, View, Worker } from './types.js' */

/** @type {[JobState, string, string][]} state, label, hint */
const CARDS = [
  ['available', 'Waiting', 'can run now'],
  ['running', 'Running', 'claimed by workers'],
  ['scheduled', 'Scheduled', 'delayed'],
  ['failed', 'Retrying', 'waiting to retry'],
  ['succeeded', 'Succeeded', 'last hour'],
  ['dead', 'Dead', 'last hour'],
];

/**
 * @param {JobState} state
 * @param {string} label
 * @param {string} hint
 * @param {number} value
 */
function card(state, label, hint, value) {
  return h(
    'a',
    { class: `card s-${state}`, href: route('jobs', { state }), dataset: { count: state } },
    h('div', { class: 'label' }, label),
    h('div', { class: 'value' }, int(value)),
    h('div', { class: 'hint' }, hint),
  );
}

/**
 * Counts by state for one queue or tenant, each a link to those jobs.
 * @param {{ counts: Counts }} group
 * @param {Record<string, string>} filter
 */
function countCells(group, filter) {
  return STATES.map((state) => {
    const n = group.counts[state];
    return n === 0 ? 0 : h('a', { class: 'count-link', href: route('jobs', { ...filter, state }) }, int(n));
  });
}

// a function: a node can sit in one table only
const stateColumns = () => STATES.map((s) => ({ label: badge(s), num: true }));

/** What zone a chart's time axis is in, beside its title. */
const zoneNote = () => h('span', { class: 'zone', title: ZONE }, ` · times in ${utcOffset(new Date())} (${ZONE})`);

/** @typedef {[string, number, number]} Range chart range: label, minutes, bucket seconds */
/** @type {Range} */
const HOUR = ['1 hour', 60, 60];
/** @type {Range[]} */
const RANGES = [
  ['15 min', 15, 15],
  HOUR,
  ['6 hours', 360, 300],
  ['24 hours', 1440, 1200],
  // a week of history (the API goes to 30 days)
  ['7 days', 10_080, 7200],
];

/** Counts of a queue with no jobs in the window (a paused queue is listed all the same). */
const NO_COUNTS = /** @type {Counts} */ (Object.fromEntries(STATES.map((s) => [s, 0])));

/**
 * Overview: counts now, activity over the last hour, per queue, per tenant and per task; pausing
 * and resuming queues.
 * @param {Context} context
 * @returns {View}
 */
export function overview({ toast }) {
  let range = RANGES.find(([label]) => label === localStorage.getItem('tusk.range')) ?? HOUR;
  const cards = h('div', { class: 'cards' });
  const rangeButtons = RANGES.map((r) =>
    h(
      'button',
      {
        type: 'button',
        class: 'small',
        onclick: () => {
          range = r;
          localStorage.setItem('tusk.range', r[0]);
          seriesAt = 0;
          refresh();
        },
      },
      r[0],
    ),
  );
  const throughputEl = h('div', { class: 'chart', 'aria-label': 'Jobs per minute' });
  const waitEl = h('div', { class: 'chart', 'aria-label': 'Wait time' });
  const queues = h('div');
  const tenants = h('div');
  const tasks = h('div');
  const el = page(
    {
      title: 'Overview',
      sub: 'counts of finished jobs are over the last hour',
      actions: rangeButtons,
      segmented: true,
    },
    cards,
    h(
      'div',
      { class: 'grid two' },
      panel(['Jobs per minute', zoneNote()], throughputEl),
      panel(['Wait time before start (p50 / p95)', zoneNote()], waitEl),
    ),
    h(
      'div',
      { class: 'stack gap-top' },
      flushPanel('Queues', queues),
      flushPanel('Tenants', tenants),
      flushPanel('Tasks', tasks),
    ),
  );

  /** @type {ReturnType<typeof timeChart> | null} */
  let throughput = null;
  /** @type {ReturnType<typeof timeChart> | null} */
  let wait = null;
  let seriesAt = 0;

  async function refreshSeries() {
    const [, minutes, bucketSeconds] = range;
    for (const b of rangeButtons) b.classList.toggle('active', b.textContent === range[0]);
    /** @type {Timeseries} */
    const { buckets } = await api(`api/timeseries?minutes=${minutes}&bucketSeconds=${bucketSeconds}`);
    const perMinute = (/** @type {number} */ n) => (n * 60) / bucketSeconds;
    throughput ??= timeChart(throughputEl, {
      series: [
        { label: 'enqueued', color: '--s-available' },
        { label: 'succeeded', color: '--s-succeeded', fill: true },
        { label: 'dead', color: '--s-dead' },
      ],
      format: (v) => (v >= 10 || v === 0 ? int(Math.round(v)) : v.toFixed(1)),
    });
    wait ??= timeChart(waitEl, {
      series: [
        { label: 'p50', color: '--s-running', spanGaps: true },
        { label: 'p95', color: '--s-failed', spanGaps: true },
      ],
      format: duration,
    });
    const times = buckets.map((b) => new Date(b.t).getTime());
    throughput(
      times,
      buckets.map((b) => perMinute(b.enqueued)),
      buckets.map((b) => perMinute(b.succeeded)),
      buckets.map((b) => perMinute(b.dead)),
    );
    wait(
      times,
      buckets.map((b) => b.waitP50),
      buckets.map((b) => b.waitP95),
    );
  }

  /**
   * Pauses a queue (no claims of its jobs by any worker; running jobs go on) or resumes it.
   * @param {string} queue
   * @param {boolean} pause
   */
  async function pauseQueue(queue, pause) {
    await api(`api/queues/${encodeURIComponent(queue)}/${pause ? 'pause' : 'resume'}`, { method: 'POST' });
    toast(`Queue ${queue} ${pause ? 'paused: no new claims' : 'resumed'}`);
    await refresh();
  }

  let refreshes = 0;

  async function refresh() {
    const call = ++refreshes;
    /** @type {[Stats, { workers: Worker[] }, PausedQueues]} */
    const [stats, { workers }, paused] = await Promise.all([
      api('api/stats'),
      api('api/workers'),
      api('api/queues/paused'),
    ]);
    // a refresh started since (the one after a pause) has newer data: leave the page to it
    if (call !== refreshes) return;
    const alive = workers.filter((w) => w.alive).length;
    cards.replaceChildren(
      ...CARDS.map(([state, label, hint]) => card(state, label, hint, stats.total.counts[state])),
      h(
        'div',
        { class: 'card', dataset: { count: 'oldest' } },
        h('div', { class: 'label' }, 'Oldest waiting'),
        h('div', { class: 'value' }, duration(stats.total.oldestWaitingMs)),
        h('div', { class: 'hint' }, 'age of the next job due'),
      ),
      h(
        'a',
        { class: 'card', href: route('workers'), dataset: { count: 'workers' } },
        h('div', { class: 'label' }, 'Workers'),
        h('div', { class: 'value' }, int(alive)),
        h('div', { class: 'hint' }, `alive of ${workers.length} registered`),
      ),
    );
    const pausedAt = new Map(paused.queues.map((p) => [p.queue, p.pausedAt]));
    const rows = [
      ...stats.queues,
      ...[...pausedAt.keys()]
        .filter((name) => !stats.queues.some((q) => q.queue === name))
        .map((queue) => ({ queue, counts: NO_COUNTS, oldestWaitingMs: null })),
    ].sort((a, b) => a.queue.localeCompare(b.queue));
    queues.replaceChildren(
      table(
        [{ label: 'Queue' }, ...stateColumns(), { label: 'Oldest wait', num: true }, { label: '' }],
        rows.map((q) => {
          const at = pausedAt.get(q.queue);
          return [
            h(
              'span',
              null,
              h('a', { href: route('jobs', { queue: q.queue }) }, q.queue),
              at
                ? h(
                    'span',
                    { class: 'badge s-failed spaced', dataset: { paused: q.queue }, title: `since ${dateTime(at)}` },
                    'paused',
                  )
                : null,
            ),
            ...countCells(q, { queue: q.queue }),
            duration(q.oldestWaitingMs),
            h(
              'div',
              { class: 'row-actions' },
              h(
                'button',
                { class: 'small', type: 'button', onclick: () => pauseQueue(q.queue, !at) },
                at ? 'Resume' : 'Pause',
              ),
            ),
          ];
        }),
        'No jobs yet.',
      ),
    );
    tenants.replaceChildren(
      table(
        [{ label: 'Tenant' }, { label: 'Slots', num: true }, ...stateColumns(), { label: 'Oldest wait', num: true }],
        stats.tenants.map((t) => [
          h(
            'a',
            { href: route('jobs', { tenant: t.tenant }) },
            t.tenant,
            t.paused ? h('span', { class: 'muted' }, ' · paused') : null,
          ),
          t.slots === null ? '∞' : int(t.slots),
          ...countCells(t, { tenant: t.tenant }),
          duration(t.oldestWaitingMs),
        ]),
        'No tenants yet.',
      ),
    );
    tasks.replaceChildren(
      table(
        [{ label: 'Task' }, ...stateColumns(), { label: 'Oldest wait', num: true }],
        stats.tasks.map((t) => [
          h('a', { href: route('jobs', { task: t.task }), dataset: { task: t.task } }, t.task),
          ...countCells(t, { task: t.task }),
          duration(t.oldestWaitingMs),
        ]),
        'No jobs yet.',
      ),
    );
    if (Date.now() - seriesAt > 5_000) {
      seriesAt = Date.now();
      await refreshSeries();
    }
  }

  return { el, refresh };
}
