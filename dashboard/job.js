// @ts-check
import { ApiError, api } from './api.js';
import { badge, dateTime, duration, h, int, json, page, panel, route, time } from './dom.js';

/** @import { Child, Context, Job, View } from './types.js' */

const RETRYABLE = ['dead', 'cancelled', 'expired', 'failed'];
const CANCELLABLE = ['scheduled', 'available', 'running', 'failed'];

/** @type {(k: string, v: Child) => HTMLDivElement} */
const fact = (k, v) => h('div', { class: 'fact' }, h('div', { class: 'k' }, k), h('div', { class: 'v' }, v));

/**
 * One job: what it is, its payload, attempts and errors, stats and result; retry and cancel.
 * @param {Context & { id: string }} context
 * @returns {View}
 */
export function job({ id, toast }) {
  const el = h('div');
  let last = '';

  /** @param {'retry' | 'cancel'} action */
  async function act(action) {
    if (action === 'cancel' && !confirm(`Cancel job ${id}?`)) return;
    /** @type {{ state: string }} */
    const { state } = await api(`api/jobs/${encodeURIComponent(id)}/${action}`, { method: 'POST' });
    toast(action === 'retry' ? `Job ${id} queued again` : `Job ${id}: ${state}`);
    await refresh();
  }

  /** @param {Job} j */
  function render(j) {
    const retry = h(
      'button',
      { class: 'primary', type: 'button', disabled: !RETRYABLE.includes(j.state), onclick: () => act('retry') },
      'Retry',
    );
    const cancel = h(
      'button',
      {
        class: 'danger',
        type: 'button',
        disabled: !CANCELLABLE.includes(j.state) || j.cancelRequested,
        onclick: () => act('cancel'),
      },
      j.cancelRequested ? 'Cancel asked' : 'Cancel',
    );
    const errors = [...j.errors].reverse();
    el.replaceChildren(
      page(
        {
          back: { href: route('jobs'), label: '← Jobs' },
          title: `Job ${j.id}`,
          sub: [h('span', { class: 'mono' }, j.task), badge(j.state, true)],
          actions: [retry, cancel],
        },
        panel(
          null,
          h(
            'div',
            { class: 'facts' },
            fact('Tenant', h('a', { href: route('jobs', { tenant: j.tenant }) }, j.tenant)),
            fact('Queue', h('a', { href: route('jobs', { queue: j.queue }) }, j.queue)),
            fact('Attempts', `${j.attempts} of ${j.maxAttempts}`),
            fact('Priority', int(j.priority)),
            fact('Created', h('span', { title: dateTime(j.createdAt) }, time(j.createdAt))),
            fact('Runs at', dateTime(j.runAt)),
            fact('Started', j.startedAt ? dateTime(j.startedAt) : '—'),
            fact('Finished', j.finishedAt ? dateTime(j.finishedAt) : '—'),
            fact('Waited', duration(j.waitMs)),
            fact('Ran', duration(j.runMs)),
            fact('Expires', j.expiresAt ? dateTime(j.expiresAt) : '—'),
            fact('Concurrency key', j.concurrencyKey ?? '—'),
          ),
        ),
        h(
          'div',
          { class: 'grid two' },
          panel('Payload', json(j.payload)),
          panel(
            'Result',
            j.state === 'succeeded'
              ? json(j.result)
              : h('div', { class: 'muted' }, j.finishedAt ? `None: the job ended ${j.state}.` : 'No result yet.'),
          ),
        ),
        h(
          'div',
          { class: 'grid two gap-top' },
          panel(
            'Stats and progress',
            j.stats || j.progress !== null
              ? h('div', {}, [
                  j.progress !== null ? h('div', { class: 'muted' }, 'Progress (ctx.progress):') : null,
                  j.progress !== null ? json(j.progress) : null,
                  j.stats ? json(j.stats) : null,
                ])
              : h('div', { class: 'muted' }, 'No stats, no progress reported.'),
          ),
          panel(
            `Failed attempts (${errors.length})`,
            errors.length === 0
              ? h('div', { class: 'muted' }, 'None.')
              : h(
                  'ol',
                  { class: 'attempts' },
                  errors.map((e) =>
                    h(
                      'li',
                      null,
                      h(
                        'div',
                        { class: 'head' },
                        h('strong', null, `Attempt ${e.attempt}`),
                        e.name ? h('span', { class: 'mono muted' }, e.name) : null,
                        h('span', { class: 'muted' }, dateTime(e.at)),
                      ),
                      h('div', { class: 'msg' }, e.message),
                      e.stack
                        ? h('details', null, h('summary', null, 'stack'), h('pre', { class: 'json' }, e.stack))
                        : null,
                    ),
                  ),
                ),
          ),
        ),
      ),
    );
  }

  /** No such job, for this token: what may have happened and where to go. */
  function renderMissing() {
    el.replaceChildren(
      page(
        { back: { href: route('jobs'), label: '← Jobs' }, title: `No job ${id}` },
        panel(
          null,
          h(
            'div',
            { class: 'notice' },
            h('p', null, `There is no job with id ${id} that this token may see.`),
            h(
              'ul',
              null,
              h('li', null, 'The id may be mistyped: ids are whole numbers, as enqueue returned them.'),
              h('li', null, 'A finished job is deleted when its tenant’s retention ends (or by tusk prune).'),
              h('li', null, 'A tenant token sees only its own tenant’s jobs.'),
            ),
            h('p', null, h('a', { href: route('jobs') }, 'Find it in the job list'), ' by task, tenant or state.'),
          ),
        ),
      ),
    );
  }

  async function refresh() {
    /** @type {Job} */
    let j;
    try {
      j = await api(`api/jobs/${encodeURIComponent(id)}`);
    } catch (error) {
      // a missing job is an answer, not a failure: the page says so and stays live
      if (!(error instanceof ApiError) || (error.status !== 404 && error.status !== 400)) throw error;
      if (last !== 'missing') renderMissing();
      last = 'missing';
      return;
    }
    // unchanged: keep the page as it is (open details, selection)
    const text = JSON.stringify(j);
    if (text === last) return;
    last = text;
    render(j);
  }

  return { el, refresh };
}
