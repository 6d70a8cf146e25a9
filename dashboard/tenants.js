// @ts-check
import { api } from './api.js';
import { duration, h, int, route, table, tablePage, time } from './dom.js';

/** @import { Context, Tenant, View } from './types.js' */

/** @type {(value: string) => number | null} */
const limit = (value) => (value.trim() === '' ? null : Number(value));

/**
 * Tenants: slots, running and waiting jobs; edit slots, pause and resume.
 * @param {Context} context
 * @returns {View}
 */
export function tenants({ toast }) {
  const { el, body } = tablePage({
    title: 'Tenants',
    sub: 'slots cap the jobs a tenant runs at once, across all workers',
  });
  /** @type {string | null} the tenant whose row is being edited */
  let editing = null;
  /** @type {Tenant[]} */
  let list = [];

  /**
   * @param {string} tenant
   * @param {Record<string, unknown>} settings
   */
  async function save(tenant, settings) {
    await api(`api/tenants/${encodeURIComponent(tenant)}`, { method: 'PATCH', body: settings });
    toast(`Tenant ${tenant} saved`);
    editing = null;
    await refresh();
  }

  /** @param {Tenant} t */
  function editCells(t) {
    const slots = h('input', {
      class: 'narrow',
      value: String(t.ownSlots ?? ''),
      placeholder: 'default',
      inputmode: 'numeric',
      'aria-label': 'slots',
    });
    const perKey = h('input', {
      class: 'narrow',
      value: String(t.perKey ?? ''),
      placeholder: 'none',
      inputmode: 'numeric',
      'aria-label': 'per key',
    });
    return {
      slots,
      perKey,
      actions: h(
        'div',
        { class: 'row-actions' },
        h(
          'button',
          {
            class: 'small primary',
            type: 'button',
            onclick: () => save(t.tenant, { slots: limit(slots.value), perKey: limit(perKey.value) }),
          },
          'Save',
        ),
        h(
          'button',
          {
            class: 'small',
            type: 'button',
            onclick: () => {
              editing = null;
              render();
            },
          },
          'Cancel',
        ),
      ),
    };
  }

  function render() {
    body.replaceChildren(
      table(
        [
          { label: 'Tenant' },
          { label: 'Slots', num: true },
          { label: 'Per key', num: true },
          { label: 'Running', num: true },
          { label: 'Waiting', num: true },
          { label: 'Scheduled', num: true },
          { label: 'Retrying', num: true },
          { label: 'Oldest waiting', num: true },
          { label: 'Last served' },
          { label: '' },
        ],
        list.map((t) => {
          const edit = editing === t.tenant ? editCells(t) : null;
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
              null,
              h('a', { href: route('jobs', { tenant: t.tenant }) }, t.tenant),
              t.paused ? h('span', { class: 'badge s-failed spaced', dataset: { paused: t.tenant } }, 'paused') : null,
            ),
            edit ? edit.slots : t.slots === null ? '∞' : `${int(t.slots)}${t.ownSlots === null ? ' (default)' : ''}`,
            edit ? edit.perKey : t.perKey === null ? '—' : int(t.perKey),
            h('span', null, int(t.running), usage),
            t.available,
            t.scheduled,
            t.retrying,
            duration(t.oldestWaitingMs),
            time(t.lastServedAt),
            edit
              ? edit.actions
              : h(
                  'div',
                  { class: 'row-actions' },
                  h(
                    'button',
                    {
                      class: 'small',
                      type: 'button',
                      onclick: () => {
                        editing = t.tenant;
                        render();
                      },
                    },
                    'Edit',
                  ),
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
    if (editing) return; // do not wipe what is being typed
    ({ tenants: list } = await api('api/tenants'));
    render();
  }

  return { el, refresh };
}
