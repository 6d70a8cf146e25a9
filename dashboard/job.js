import { api } from './api.js';
import { badge, dateTime, duration, h, int, json, panel, route, time } from './dom.js';

const RETRYABLE = ['dead', 'cancelled', 'expired', 'failed'];
const CANCELLABLE = ['scheduled', 'available', 'running', 'failed'];

const fact = (k, v) => h('div', { class: 'fact' }, h('div', { class: 'k' }, k), h('div', { class: 'v' }, v));

/** One job: what it is, its payload, attempts and errors, stats and result; retry and cancel. */
export function job({ id, toast }) {
  const el = h('div');
  let last = '';

  async function act(action) {
    if (action === 'cancel' && !confirm(`Cancel job ${id}?`)) return;
    const { state } = await api(`api/jobs/${encodeURIComponent(id)}/${action}`, { method: 'POST' });
    toast(action === 'retry' ? `Job ${id} queued again` : `Job ${id}: ${state}`);
    await refresh();
  }

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
      h(
        'div',
        { class: 'page-head' },
        h('a', { href: route('jobs') }, '← Jobs'),
        h('h1', null, `Job ${j.id}`),
        h('span', { class: 'mono' }, j.task),
        badge(j.state, true),
        h('div', { class: 'actions' }, retry, cancel),
      ),
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
        panel('Stats', j.stats ? json(j.stats) : h('div', { class: 'muted' }, 'No stats.')),
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
    );
  }

  async function refresh() {
    const j = await api(`api/jobs/${encodeURIComponent(id)}`);
    // unchanged: keep the page as it is (open details, selection)
    const text = JSON.stringify(j);
    if (text === last) return;
    last = text;
    render(j);
  }

  return { el, refresh };
}
