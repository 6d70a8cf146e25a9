/** How long a client of `listen` may take to send a request's headers, by default (ms). */
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
/** How long a client of `listen` may take to send a whole request, by default (ms). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/**
 * The bounds `listen` sets, from the ones given: the headers' default is the request's
 * bound if that is less. The caller refuses `headers > request` (Node would), in its own
 * words: the server names its options, `tusk serve` its flags.
 */
export function requestBounds(given: { headersTimeoutMs?: number; requestTimeoutMs?: number }): {
  headers: number;
  request: number;
} {
  const request = given.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  return { headers: given.headersTimeoutMs ?? Math.min(DEFAULT_HEADERS_TIMEOUT_MS, request), request };
}
