/** How long a client of `listen` may take to send a request's headers, by default (ms). */
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
/** How long a client of `listen` may take to send a whole request, by default (ms). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
