// @ts-check
import { api } from './api.js';
import { ago, clock, duration, h, int, panel, route, table, tablePage, time } from './dom.js';

/** @import { Child, Context, Tenant, View, WaitReason } from './types.js' */

/** @type {(value: string) => number | null} */
const limit = (value) => (value.trim() === '' ? null : Number(value));

/** Rate windows offered when editing: label, ms. @type {[string, number][]} */
const WINDOWS = [
  ['second', 1000],
  ['minute', 60_000],
  ['hour', 3_600_000],
  ['day', 86_400_000],
];

/**
 * A rate window, short: `s`, `min`, `5 min`, `h`, `day`; other lengths as durations.
 * @param {number} ms
 */
function per(ms) {
  for (const [unit, size] of [
    ['day', 86_400_000],
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1000],
  ]) {
    const n = ms / Number(size);
    if (Number.isInteger(n)) return n === 1 ? String(unit) : `${n} ${unit}`;
  }
  return duration(ms);
}

/**
 * Why a tenant's jobs wait, as the server says, in words.
 * @type {Record<WaitReason, (t: Tenant) => string>}
 */
const WHY = {
  paused: () => 'tenant paused',
  queue_paused: () => 'queue paused',
  slots_full: (t) => `slots full (${int(t.running)} of ${int(t.slots)})`,
  rate_limited: (t) =>
    `rate limited until ${t.rateResetsAt ? clock(new Date(t.rateResetsAt)) : '—'}${t.rate ? ` (${int(t.rate.limit)} / ${per(t.rate.perMs)})` : ''}`,
  worker: () => 'waiting for a worker',
  scheduled: (t) => `scheduled: next ${ago(t.nextRunAt)}`,
};

/** @param {Tenant} t */
const whyCell = (t) =>
  t.waitReasons.length === 0
    ? h('span', { class: 'muted' }, '—')
    : h(
        'div',
        { class: 'why' },
        t.waitReasons.map((reason) => h('span', { class: `why-${reason}`, dataset: { why: reason } }, WHY[reason](t))),
      );

/** @param {Tenant} t */
const retentionCell = (t) =>
  h(
    'div',
    { class: 'when' },
    h('div', null, t.retention ?? 'forever'),
    t.ownRetention === null ? h('div', { class: 'muted' }, 'default') : null,
  );

/**
 * Tenants: slots, rate limit, retention, running and waiting jobs and why they wait; edit
 * the settings, pause and resume.
 * @param {Context} context
 * @returns {View}
 */
export function tenants({ toast }) {
  const editor = h('div');
  const { el, body } = tablePage(
    {
      title: 'Tenants',
      sub: 'slots cap the jobs a tenant runs at once, its rate the jobs it starts per window, across all workers',
    },
    editor,
  );
  body.className = 'dense';
  /** @type {Tenant[]} */
  let list = [];
  let refreshes = 0;

  /**
   * @param {string} tenant
   * @param {Record<string, unknown>} settings
   */
  async function save(tenant, settings) {
    await api(`api/tenants/${encodeURIComponent(tenant)}`, { method: 'PATCH', body: settings });
    toast(`Tenant ${tenant} saved`);
    edit(null);
    await refresh();
  }

  /** @param {string | null} tenant the tenant to edit; null closes the editor */
  function edit(tenant) {
    const t = list.find((x) => x.tenant === tenant);
    editor.replaceChildren(t ? form(t) : '');
    if (t) editor.querySelector('input')?.focus();
  }

  /**
   * The editor of a tenant's settings; an empty field goes back to the default, or no limit.
   * @param {Tenant} t
   */
  function form(t) {
    /** @type {(label: string, input: HTMLElement, hint?: Child) => HTMLLabelElement} */
    const field = (label, input, hint) => h('label', { class: 'field' }, label, input, hint ?? null);
    const number = (
      /** @type {string} */ name,
      /** @type {number | null} */ value,
      /** @type {string} */ placeholder,
    ) =>
      h('input', {
        name,
        class: 'narrow',
        value: value === null ? '' : String(value),
        placeholder,
        inputmode: 'numeric',
        'aria-label': name,
      });
    const slots = number('slots', t.ownSlots, 'default');
    const perKey = number('per key', t.perKey, 'none');
    const rateLimit = number('rate limit', t.rate?.limit ?? null, 'none');
    const perMs = t.rate?.perMs ?? 60_000;
    const windows = WINDOWS.some(([, ms]) => ms === perMs) ? WINDOWS : [...WINDOWS, [per(perMs), perMs]];
    const rateWindow = h(
      'select',
      { name: 'rate window', 'aria-label': 'rate window' },
      windows.map(([label, ms]) => h('option', { value: String(ms), selected: ms === perMs }, `per ${label}`)),
    );
    const retention = h('input', {
      name: 'retention',
      value: t.ownRetention ?? '',
      placeholder: 'default',
      list: 'retention-periods',
      'aria-label': 'retention',
      autocomplete: 'off',
    });
    return panel(
      `Tenant ${t.tenant}`,
      h(
        'form',
        {
          class: 'filters',
          onsubmit: (event) => {
            event.preventDefault();
            const n = limit(rateLimit.value);
            save(t.tenant, {
              slots: limit(slots.value),
              perKey: limit(perKey.value),
              rate: n === null ? null : { limit: n, perMs: Number(rateWindow.value) },
              retention: retention.value.trim() === '' ? null : retention.value.trim(),
            });
          },
        },
        field('slots', slots),
        field('per key', perKey),
        field('rate: starts', rateLimit),
        field('window', rateWindow),
        field('retention', retention),
        h(
          'datalist',
          { id: 'retention-periods' },
          ['7 days', '30 days', '90 days', '1 year'].map((p) => h('option', { value: p })),
        ),
        h('button', { class: 'primary', type: 'submit' }, 'Save'),
        h('button', { type: 'button', onclick: () => edit(null) }, 'Cancel'),
      ),
      h(
        'p',
        { class: 'muted hint' },
        'Empty: slots and retention go back to the default, per key and rate to no limit. Retention: how long finished jobs are kept, e.g. 30 days.',
      ),
    );
  }

  function render() {
    body.replaceChildren(
      table(
        [
          { label: 'Tenant' },
          { label: 'Slots', num: true },
          { label: 'Per key', num: true },
          { label: 'Rate', num: true },
          { label: 'Retention' },
          { label: 'Running', num: true },
          { label: 'Waiting', num: true },
          { label: 'Scheduled', num: true },
          { label: 'Retrying', num: true },
          { label: 'Oldest wait', num: true },
          { label: 'Why waiting', class: 'wrap' },
          { label: 'Last served' },
          { label: '' },
        ],
        list.map((t) => {
          const usage = t.slots
            ? h(
                'span',
                { class: 'bar', title: `${t.running} of ${t.slots} slots` },
                h('span', { style: `width: ${Math.min(100, (100 * t.running) / t.slots)}%` }),
              )
            : null;
          return [
            h(
              'span',
              { dataset: { tenant: t.tenant } },
              h('a', { href: route('jobs', { tenant: t.tenant }) }, t.tenant),
              t.paused ? h('span', { class: 'badge s-failed spaced', dataset: { paused: t.tenant } }, 'paused') : null,
            ),
            h(
              'div',
              { class: 'when' },
              h('div', null, t.slots === null ? '∞' : int(t.slots)),
              t.ownSlots === null ? h('div', { class: 'muted' }, 'default') : null,
            ),
            t.perKey === null ? '—' : int(t.perKey),
            t.rate ? `${int(t.rate.limit)} / ${per(t.rate.perMs)}` : '—',
            retentionCell(t),
            h('div', { class: 'when' }, h('div', null, int(t.running)), usage),
            t.available,
            t.scheduled,
            t.retrying,
            duration(t.oldestWaitingMs),
            whyCell(t),
            time(t.lastServedAt),
            h(
              'div',
              { class: 'row-actions' },
              h('button', { class: 'small', type: 'button', onclick: () => edit(t.tenant) }, 'Edit'),
              h(
                'button',
                { class: 'small', type: 'button', onclick: () => save(t.tenant, { paused: !t.paused }) },
                t.paused ? 'Resume' : 'Pause',
              ),
            ),
          ];
        }),
        'No tenants yet: a tenant appears with its first job or its settings.',
      ),
    );
  }

  async function refresh() {
    const call = ++refreshes;
    /** @type {{ tenants: Tenant[] }} */
    const answer = await api('api/tenants');
    // a refresh started since (the one after a save) has newer data
    if (call !== refreshes) return;
    list = answer.tenants;
    render();
  }

  return { el, refresh };
}
