// @ts-check
import { api } from './api.js';
import { ago, dateTime, h, route, table, tablePage } from './dom.js';

/** @import { Context, Schedule, View } from './types.js' */

/**
 * A tick's time with its zone, and how far it is from now.
 * @param {string | null} iso
 * @param {string} none what to say when there is no such tick
 */
const tick = (iso, none) =>
  iso
    ? h('div', { class: 'when' }, h('div', null, dateTime(iso)), h('div', { class: 'muted' }, ago(iso)))
    : h('span', { class: 'muted' }, none);

/**
 * Schedules: each cron expression with its time zone and job, its next and last tick and
 * the last tick's job; pausing, resuming and removing one.
 * @param {Context} context
 * @returns {View}
 */
export function schedules({ toast }) {
  const { el, body } = tablePage({
    title: 'Schedules',
    sub: 'recurring jobs: one job per tick, whatever the number of workers',
  });
  let refreshes = 0;

  /** @param {Schedule} s */
  async function remove(s) {
    const back =
      s.source === 'crontab'
        ? ' It comes from a crontab file: the next sync sets it again unless the file drops it.'
        : '';
    if (!confirm(`Remove the schedule ${s.name}? Its ticks enqueued ahead are cancelled.${back}`)) return;
    await api(`api/schedules/${encodeURIComponent(s.name)}`, { method: 'DELETE' });
    toast(`Schedule ${s.name} removed`);
    await refresh();
  }

  /** @param {Schedule} s */
  async function pauseOrResume(s) {
    const action = s.pausedAt ? 'resume' : 'pause';
    await api(`api/schedules/${encodeURIComponent(s.name)}/${action}`, { method: 'POST' });
    toast(`Schedule ${s.name} ${s.pausedAt ? 'resumed at its next tick' : 'paused'}`);
    await refresh();
  }

  async function refresh() {
    const call = ++refreshes;
    /** @type {{ schedules: Schedule[] }} */
    const { schedules: list } = await api('api/schedules');
    // a refresh started since (the one after a removal) has newer data
    if (call !== refreshes) return;
    body.replaceChildren(
      table(
        [
          { label: 'Schedule' },
          { label: 'Cron' },
          { label: 'Time zone' },
          { label: 'Task' },
          { label: 'Tenant' },
          { label: 'Queue' },
          { label: 'Next run' },
          { label: 'Last run' },
          { label: 'Last job', num: true },
          { label: '' },
        ],
        list.map((s) => [
          h(
            'span',
            { dataset: { schedule: s.name } },
            s.name,
            s.source === 'crontab'
              ? h('span', { class: 'muted', title: 'kept in sync with a crontab file' }, ' · crontab')
              : null,
            s.pausedAt
              ? h('span', { class: 'badge s-cancelled', title: `paused ${dateTime(s.pausedAt)}` }, ' paused')
              : null,
          ),
          h('code', null, s.cron),
          s.tz,
          s.task,
          h('a', { href: route('jobs', { tenant: s.tenant }) }, s.tenant),
          h('a', { href: route('jobs', { queue: s.queue }) }, s.queue),
          s.pausedAt ? h('span', { class: 'muted' }, 'paused') : tick(s.nextRunAt, 'none left'),
          tick(s.lastRunAt, 'not yet'),
          s.lastJobId ? h('a', { href: route(`jobs/${s.lastJobId}`), class: 'mono' }, s.lastJobId) : '—',
          h(
            'div',
            { class: 'row-actions' },
            h(
              'button',
              { class: 'small', type: 'button', onclick: () => pauseOrResume(s) },
              s.pausedAt ? 'Resume' : 'Pause',
            ),
            h('button', { class: 'small danger', type: 'button', onclick: () => remove(s) }, 'Remove'),
          ),
        ]),
        'No schedules: set one with tusk.schedules.set(), tusk schedules set, or a crontab file (tusk schedules sync).',
      ),
    );
  }

  return { el, refresh };
}
