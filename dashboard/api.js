// @ts-check
// Calls to the server's API, with the token kept in this browser.

const KEY = 'tusk.token';

export const token = {
  get: () => localStorage.getItem(KEY),
  set: (/** @type {string} */ value) => localStorage.setItem(KEY, value),
  clear: () => localStorage.removeItem(KEY),
};

export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {any} body the error body, `{ error: { code, message } }`, or whatever came instead
   */
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

/** The server did not answer at all (stopped, restarting, network down): fetch itself failed. */
export class UnreachableError extends Error {
  /** @param {unknown} cause */
  constructor(cause) {
    super(`Cannot reach the Tusk server at ${location.host}: it has stopped, or the network is down.`, { cause });
  }
}

// A page redrawn between a button's press and its release loses the click: the press and
// the release land on different elements. So answers that arrive while a pointer is down
// wait for its release, and for the click that follows it in the same task; a press held
// longer than a second (a drag, a select's list, whose release the page may not see) lets
// them through.
let pressed = false;
let holding = 0;
/** @type {(() => void)[]} */
const waiting = [];
const letThrough = () => {
  clearTimeout(holding);
  pressed = false;
  for (const resume of waiting.splice(0)) resume();
};
document.addEventListener(
  'pointerdown',
  () => {
    pressed = true;
    clearTimeout(holding);
    holding = window.setTimeout(letThrough, 1000);
  },
  true,
);
for (const end of ['pointerup', 'pointercancel']) {
  document.addEventListener(end, () => setTimeout(letThrough, 0), true);
}
/** @returns {Promise<void> | undefined} */
const released = () => (pressed ? new Promise((resume) => waiting.push(resume)) : undefined);

/**
 * The headers of a request to the API: what it accepts, and the token if there is one.
 * @param {string} accept
 * @returns {Record<string, string>}
 */
function headersFor(accept) {
  /** @type {Record<string, string>} */
  const headers = { accept };
  const t = token.get();
  if (t) headers.authorization = `Bearer ${t}`;
  return headers;
}

/**
 * `api('api/jobs?state=dead')`, `api('api/jobs/4/retry', { method: 'POST' })`. Paths are
 * relative to the page. The answer's type is the caller's to say (the server's response
 * schemas, in types.d.ts).
 * @template T
 * @param {string} path
 * @param {{ method?: 'GET' | 'POST' | 'PATCH' | 'DELETE', body?: unknown }} [options]
 * @returns {Promise<T>}
 */
export async function api(path, { method = 'GET', body } = {}) {
  const headers = headersFor('application/json');
  // every write says JSON, with a body or without: the server refuses others (a page of
  // another site could send them)
  if (method !== 'GET') headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (error) {
    throw new UnreachableError(error);
  }
  const type = response.headers.get('content-type') ?? '';
  const data = type.includes('json') ? await response.json() : await response.text();
  await released();
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/**
 * Follows the server's event stream (`GET api/events`: jobs finishing, progress) and calls
 * `onEvent` with each event's name. Read with fetch, not EventSource, which cannot send the
 * token. Resolves when the stream ends or `signal` aborts it; rejects if it cannot open.
 * @param {(event: string) => void} onEvent
 * @param {AbortSignal} signal
 * @returns {Promise<void>}
 */
export async function follow(onEvent, signal) {
  const response = await fetch('api/events', { headers: headersFor('text/event-stream'), signal });
  if (!response.ok || !response.body) throw new ApiError(response.status, await response.text());
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    text += value;
    for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
      const event = /^event: (.*)$/m.exec(text.slice(0, end))?.[1];
      text = text.slice(end + 2);
      if (event) onEvent(event);
    }
  }
}
