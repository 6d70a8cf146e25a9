// @ts-check
// DOM helpers. Every piece of data reaches the page as a text node or a property, never
// as HTML: a payload holding <script> is shown as text.
/** @import { Child, Head, JobState, Props } from './types.js' */

/**
 * An element: `h('a', { href: '#/jobs', class: 'x', onclick: fn }, 'text', child)`.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Props | null} [props]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = String(value);
    else if (key === 'style')
      el.style.cssText = String(value); // CSSOM: allowed by the page's CSP, unlike style=""
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    else if (typeof value !== 'string' && key in el)
      /** @type {Record<string, unknown>} */ (/** @type {unknown} */ (el))[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

/**
 * Appends children, flattened, to `el`: nodes as they are, anything else as text.
 * @param {Node} el
 * @param {Child} child
 */
function append(el, child) {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) for (const c of child) append(el, c);
  else el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
}

/**
 * A link inside the dashboard: `route('jobs', { state: 'dead' })` → `#/jobs?state=dead`.
 * @param {string} path
 * @param {Record<string, string | null | undefined>} [params]
 */
export function route(path, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') query.set(k, v);
  const q = query.toString();
  return `#/${path}${q ? `?${q}` : ''}`;
}

/** @type {JobState[]} */
export const STATES = ['scheduled', 'available', 'running', 'failed', 'succeeded', 'dead', 'cancelled', 'expired'];
/** What the dashboard calls each state. @type {Record<string, string>} */
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

/** A state as a coloured badge. @type {(state: string, big?: boolean) => HTMLSpanElement} */
export const badge = (state, big = false) =>
  h('span', { class: `badge s-${state}${big ? ' big' : ''}`, dataset: { state } }, STATE_LABELS[state] ?? state);

/** A count with thousands separators; `—` for none. @type {(n: number | string | null | undefined) => string} */
export const int = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));

/**
 * A duration in ms, short: `340 ms`, `2.5 s`, `4.2 min`, `3.1 h`.
 * @param {number | null | undefined} ms
 */
export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  if (ms < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  if (ms < 86_400_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}

/**
 * `12 s ago`, `in 3 min`.
 * @param {string | null | undefined} iso
 */
export function ago(iso) {
  if (!iso) return '—';
  const diff = Date.now() - new Date(iso).getTime();
  if (Math.abs(diff) < 1000) return 'just now';
  const text = duration(Math.abs(diff)).replace(/\.\d+/, '');
  return diff >= 0 ? `${text} ago` : `in ${text}`;
}

/**
 * The browser's offset from UTC at `d`: `UTC`, `UTC+2`, `UTC-5:30`. An offset rather than
 * an abbreviation: abbreviations are ambiguous (CST) or missing for many zones.
 * @param {Date} d
 */
export function utcOffset(d) {
  const minutes = -d.getTimezoneOffset();
  if (minutes === 0) return 'UTC';
  const abs = Math.abs(minutes);
  const rest = abs % 60;
  return `UTC${minutes < 0 ? '-' : '+'}${Math.floor(abs / 60)}${rest ? `:${String(rest).padStart(2, '0')}` : ''}`;
}

/** The browser's time zone by name (`Europe/Paris`), which every time shown is in. */
export const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

const pad = (/** @type {number} */ n) => String(n).padStart(2, '0');

/**
 * A local date and time to the second, with its offset: `2030-01-01 10:00:00 UTC+1`.
 * @param {string | null | undefined} iso
 */
export function dateTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(d)}`;
}

/**
 * A local time of day with its offset: `10:00:00 UTC+1` (`10:00 UTC+1` without seconds).
 * @param {Date} d
 * @param {boolean} [seconds]
 */
export function clock(d, seconds = true) {
  return `${pad(d.getHours())}:${pad(d.getMinutes())}${seconds ? `:${pad(d.getSeconds())}` : ''} ${utcOffset(d)}`;
}

/** A time element showing `ago`, with the exact time and its zone on hover. @type {(iso: string | null | undefined) => Child} */
export const time = (iso) => (iso ? h('time', { datetime: iso, title: `${dateTime(iso)} (${ZONE})` }, ago(iso)) : '—');

/**
 * A table: `columns` are `{ label, num? }`; rows are arrays of cells (text or nodes).
 * @param {{ label: Child, num?: boolean, class?: string }[]} columns
 * @param {Child[][]} rows
 * @param {string} [empty] what an empty table says instead
 */
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
              const col = columns[i] ?? { label: '' };
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

/**
 * A titled panel.
 * @param {Child} title
 * @param {...Child} children
 */
export const panel = (title, ...children) =>
  h('section', { class: 'panel' }, title ? h('h2', null, title) : null, ...children);

/**
 * A panel without padding, for a table edge to edge.
 * @param {Child} title
 * @param {...Child} children
 */
export const flushPanel = (title, ...children) =>
  h('section', { class: 'panel flush' }, title ? h('h2', null, title) : null, ...children);

/**
 * The head of a page: a link back, the title, what the page shows, its actions.
 * @param {Head} head
 */
export function pageHead({ title, back, sub, actions, segmented = false }) {
  return h(
    'div',
    { class: 'page-head' },
    back ? h('a', { href: back.href }, back.label) : null,
    h('h1', null, title),
    typeof sub === 'string' ? h('span', { class: 'sub' }, sub) : sub,
    actions ? h('div', { class: segmented ? 'actions segmented' : 'actions' }, actions) : null,
  );
}

/**
 * A page: its head, then its content (panels, forms).
 * @param {Head} head
 * @param {...Child} content
 */
export const page = (head, ...content) => h('div', null, pageHead(head), ...content);

/**
 * A page that is one table, refreshed in place: `body` is where the table goes, after
 * what `before` holds (a form).
 * @param {Head} head
 * @param {...Child} before
 */
export function tablePage(head, ...before) {
  const body = h('div');
  return { el: page(head, ...before, flushPanel(null, body)), body };
}

/** Pretty JSON as text. @type {(value: unknown) => HTMLPreElement} */
export const json = (value) => h('pre', { class: 'json' }, JSON.stringify(value, null, 2) ?? 'null');
