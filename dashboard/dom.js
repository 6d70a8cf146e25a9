// DOM helpers. Every piece of data reaches the page as a text node or a property, never
// as HTML: a payload holding <script> is shown as text.

/** An element: `h('a', { href: '#/jobs', class: 'x', onclick: fn }, 'text', child)`. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'style')
      el.style.cssText = value; // CSSOM: allowed by the page's CSP, unlike style=""
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (typeof value !== 'string' && key in el) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Number.POSITIVE_INFINITY)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** A link inside the dashboard: `route('jobs', { state: 'dead' })` → `#/jobs?state=dead`. */
export function route(path, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') query.set(k, v);
  const q = query.toString();
  return `#/${path}${q ? `?${q}` : ''}`;
}

export const STATES = ['scheduled', 'available', 'running', 'failed', 'succeeded', 'dead', 'cancelled', 'expired'];
/** What the dashboard calls each state. */
export const STATE_LABELS = {
  scheduled: 'scheduled',
  available: 'waiting',
  running: 'running',
  failed: 'retrying',
  succeeded: 'succeeded',
  dead: 'dead',
  cancelled: 'cancelled',
  expired: 'expired',
};

export const badge = (state, big = false) =>
  h('span', { class: `badge s-${state}${big ? ' big' : ''}`, dataset: { state } }, STATE_LABELS[state] ?? state);

export const int = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));

/** A duration in ms, short: `340 ms`, `2.5 s`, `4.2 min`, `3.1 h`. */
export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  if (ms < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  if (ms < 86_400_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}

/** `12 s ago`, `in 3 min`. */
export function ago(iso) {
  if (!iso) return '—';
  const diff = Date.now() - new Date(iso).getTime();
  if (Math.abs(diff) < 1000) return 'just now';
  const text = duration(Math.abs(diff)).replace(/\.\d+/, '');
  return diff >= 0 ? `${text} ago` : `in ${text}`;
}

/** A local date and time, to the second. */
export function dateTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A time element showing `ago`, with the exact time on hover. */
export const time = (iso) => (iso ? h('time', { datetime: iso, title: dateTime(iso) }, ago(iso)) : '—');

/** A table: `columns` are `{ label, num? }`; rows are arrays of cells (text or nodes). */
export function table(columns, rows, empty = 'Nothing here yet.') {
  if (rows.length === 0) return h('div', { class: 'empty' }, empty);
  return h(
    'div',
    { class: 'table-scroll' },
    h(
      'table',
      null,
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          columns.map((c) => h('th', { class: c.num ? 'num' : null }, c.label)),
        ),
      ),
      h(
        'tbody',
        null,
        rows.map((cells) =>
          h(
            'tr',
            null,
            cells.map((cell, i) => {
              const col = columns[i] ?? {};
              const zero = col.num && (cell === 0 || cell === '0');
              return h(
                'td',
                { class: [col.num ? 'num' : '', zero ? 'zero' : '', col.class ?? ''].join(' ').trim() || null },
                cell,
              );
            }),
          ),
        ),
      ),
    ),
  );
}

/** A titled panel. */
export const panel = (title, ...children) =>
  h('section', { class: 'panel' }, title ? h('h2', null, title) : null, ...children);

/** Pretty JSON as text. */
export const json = (value) => h('pre', { class: 'json' }, JSON.stringify(value, null, 2) ?? 'null');
