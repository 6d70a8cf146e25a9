// @ts-check
import { ApiError, api, follow, token, UnreachableError } from './api.js';
import { clock, h } from './dom.js';
import { job } from './job.js';
import { jobs } from './jobs.js';
import { overview } from './overview.js';
import { schedules } from './schedules.js';
import { tasks } from './tasks.js';
import { tenants } from './tenants.js';
import { workers } from './workers.js';

/** @import { Context, View, Whoami } from './types.js' */

// Live updates: the page redraws as the server's event stream announces jobs finishing or
// making progress, and polls every 2 s for the rest (`?refresh=500` in the page's address
// to change it), paused while the tab is hidden.
const REFRESH_MS = Math.max(200, Number(new URLSearchParams(location.search).get('refresh')) || 2000);

/** @type {[name: string, label: string, view: (context: Context) => View, access: 'admin' | 'any'][]} */
const SECTIONS = [
  ['', 'Overview', overview, 'admin'],
  ['jobs', 'Jobs', jobs, 'any'],
  ['tenants', 'Tenants', tenants, 'admin'],
  ['schedules', 'Schedules', schedules, 'admin'],
  ['tasks', 'Tasks', tasks, 'admin'],
  ['workers', 'Workers', workers, 'admin'],
];

/**
 * An element of index.html, which has them all.
 * @param {string} id
 */
function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no #${id}`);
  return el;
}

const main = byId('main');
const nav = byId('nav');
const live = byId('live');
const liveText = byId('live-text');
const toastEl = byId('toast');
/** @type {Whoami | null} */
let who = null;
/** @type {View | null} */
let current = null;
let busy = false;
let toastTimer = 0;

/**
 * @param {string} message
 * @param {boolean} [error]
 */
function toast(message, error = false) {
  toastEl.textContent = message;
  toastEl.className = `toast${error ? ' error' : ''}`;
  clearTimeout(toastTimer);
  toastTimer = window.setTimeout(() => toastEl.classList.add('hidden'), 3500);
}

/**
 * @param {boolean} ok
 * @param {string} text
 */
function setLive(ok, text) {
  live.className = `live ${ok ? 'ok' : 'error'}`;
  liveText.textContent = text;
}

/** What to do about a server that does not answer, said where the page says what it shows. */
const EVERY = REFRESH_MS < 1000 ? `${REFRESH_MS} ms` : `${Math.round(REFRESH_MS / 1000)} s`;
const RESTART_HINT = `Start it again (tusk serve, or your app); this page retries every ${EVERY}.`;

/** @param {unknown} error */
function fail(error) {
  if (error instanceof ApiError && error.status === 401) {
    signIn(token.get() ? 'That token is unknown or revoked.' : '');
    return;
  }
  if (error instanceof UnreachableError) {
    setLive(false, 'server unreachable · retrying');
    toast(`${error.message} ${RESTART_HINT}`, true);
    return;
  }
  setLive(false, 'not updating');
  toast(error instanceof Error ? error.message : String(error), true);
}

/** @param {string} message why it is asked again, if it is */
function signIn(message) {
  clearTimeout(retryStart);
  streaming?.abort();
  streaming = null;
  token.clear();
  current = null;
  who = null;
  nav.replaceChildren();
  byId('who').textContent = '';
  byId('signout').classList.add('hidden');
  const input = h('input', {
    type: 'password',
    placeholder: 'tusk_…',
    autocomplete: 'off',
    'aria-label': 'token',
    required: true,
  });
  main.replaceChildren(
    h(
      'section',
      { class: 'panel signin' },
      h('h1', null, 'Sign in'),
      h(
        'p',
        null,
        'This server asks for an API token. Create one with ',
        h('code', null, 'tusk tokens create'),
        ', or use TUSK_ADMIN_TOKEN.',
      ),
      h(
        'form',
        {
          onsubmit: (event) => {
            event.preventDefault();
            token.set(input.value.trim());
            start();
          },
        },
        input,
        h('button', { class: 'primary', type: 'submit' }, 'Sign in'),
      ),
      message ? h('div', { class: 'error-text' }, message) : null,
    ),
  );
  input.focus();
}

/** @param {Whoami} caller the sections it may see */
const allowedSections = (caller) => SECTIONS.filter(([, , , access]) => access === 'any' || caller.role === 'admin');

/** The view for the address after `#`: `/jobs/42`, `/jobs?state=dead`, `/tenants`... */
function show() {
  if (!who) return;
  const [path = '', query = ''] = location.hash.replace(/^#\/?/, '').split('?');
  const params = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean);
  const allowed = allowedSections(who);
  const section = allowed.find(([name]) => name === (parts[0] ?? '')) ?? allowed[0];
  if (!section) return;
  /** @type {Context} */
  const context = { params, who, toast, navigate: (hash) => (location.hash = hash) };
  const view = section[0] === 'jobs' && parts[1] ? job({ ...context, id: parts[1] }) : section[2](context);
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('active', a.dataset.section === section[0]);
  current = view;
  main.replaceChildren(view.el);
  tick();
}

async function tick() {
  if (!current || busy) return;
  busy = true;
  const view = current;
  try {
    await view.refresh();
    if (view === current) setLive(true, `live · ${clock(new Date())}`);
  } catch (error) {
    fail(error);
  } finally {
    busy = false;
  }
}

let retryStart = 0;

async function start() {
  clearTimeout(retryStart);
  /** @type {Whoami} */
  let caller;
  try {
    caller = await api('api/whoami');
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      setLive(false, 'signed out');
      signIn(token.get() ? 'That token is unknown or revoked.' : '');
      return;
    }
    // unreachable or failing: say so and what to do, and try again until it answers
    const unreachable = error instanceof UnreachableError;
    setLive(false, unreachable ? 'server unreachable · retrying' : 'server error · retrying');
    main.replaceChildren(
      h(
        'section',
        { class: 'panel notice', role: 'alert' },
        h('h1', null, unreachable ? 'The server does not answer' : 'The server answered with an error'),
        h('p', null, error instanceof Error ? error.message : String(error)),
        h('p', null, unreachable ? RESTART_HINT : 'Its log says more; this page tries again.'),
        h('button', { class: 'primary', type: 'button', onclick: () => start() }, 'Try again now'),
      ),
    );
    retryStart = window.setTimeout(start, REFRESH_MS);
    return;
  }
  who = caller;
  byId('who').textContent = !who.auth ? 'no auth (loopback)' : who.role === 'admin' ? 'admin' : `tenant ${who.tenant}`;
  byId('signout').classList.toggle('hidden', !who.auth);
  nav.replaceChildren(
    ...allowedSections(who).map(([name, label]) => h('a', { href: `#/${name}`, dataset: { section: name } }, label)),
  );
  show();
  stream();
}

/** @type {AbortController | null} */
let streaming = null;
let soon = 0;

/** Follows the event stream while signed in: each event redraws the page (at most every 100 ms). */
function stream() {
  streaming?.abort();
  const controller = new AbortController();
  streaming = controller;
  follow((event) => {
    if (event === 'ready' || document.hidden) return;
    clearTimeout(soon);
    soon = window.setTimeout(tick, 100);
  }, controller.signal)
    .catch(() => {})
    // ended or failed (server gone, token revoked): polling goes on; try again in a while
    .finally(() => {
      if (streaming === controller && !controller.signal.aborted) window.setTimeout(stream, Math.max(REFRESH_MS, 2000));
    });
}

byId('signout').addEventListener('click', () => signIn(''));
window.addEventListener('hashchange', show);
document.addEventListener('visibilitychange', () => !document.hidden && tick());
setInterval(() => !document.hidden && tick(), REFRESH_MS);
// async actions in views (retry, save...) report their errors here
window.addEventListener('unhandledrejection', (event) => {
  event.preventDefault();
  fail(event.reason);
});
start();
