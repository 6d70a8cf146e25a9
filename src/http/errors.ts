import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import {
  LeaseLostError,
  SQLSTATE,
  TuskError,
  TuskNotFoundError,
  TuskSchemaError,
  TuskValidationError,
} from '../errors.js';
import type { Logger } from '../log.js';

/** An error answered with its status: `{ error: { code, message, field? } }`, and `headers` if any. */
export class HttpError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly field?: string,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}

export const notFound = (what: string) => new HttpError(404, 'not_found', `${what} not found`);

/**
 * Runs a library call for a request body: the library names fields by its arguments
 * (`payload.a`, `jobs[2].payload`, `options.delayMs`, `result`), the API by the body
 * (`body.payload.a`, `body.jobs.2.payload`, `body.delayMs`, `body.result`).
 */
export async function inBody<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (!(error instanceof TuskValidationError)) throw error;
    const field = `body.${error.field.replace(/\[(\d+)\]/g, '.$1')}`.replace(/^body\.(options|settings)\b/, 'body');
    throw new TuskValidationError(field, error.message.slice(error.field.length + 2));
  }
}

/**
 * Hono's error handler: Tusk's errors to their HTTP status, anything else to 500 (logged
 * at error level). A refusal of the server's own (an HttpError) is not logged, an upload
 * the client cut off is logged at debug level, a statement timeout at warn.
 */
export function errorHandler(log: Logger) {
  return (error: Error, c: Context): Response => {
    const e = toHttpError(error);
    if (e.code === 'aborted')
      log.debug(
        { err: error, path: c.req.path },
        'tusk http: the request ended before it was read whole (the client left, or it took longer than requestTimeoutMs)',
      );
    else if (e.code === 'timeout') log.warn({ err: error, path: c.req.path }, 'tusk http: statement timeout');
    else if (e.status >= 500 && !(error instanceof HttpError)) {
      log.error({ err: error, path: c.req.path }, 'tusk http: request failed');
    }
    const body: { code: string; message: string; field?: string } = { code: e.code, message: e.message };
    if (e.field !== undefined) body.field = e.field;
    return c.json({ error: body }, e.status, e.headers);
  };
}

function toHttpError(error: Error): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof TuskValidationError) return new HttpError(400, 'invalid', error.message, error.field);
  if (error instanceof TuskNotFoundError) return new HttpError(404, 'not_found', error.message);
  if (error instanceof LeaseLostError) return new HttpError(409, 'lease_lost', error.message);
  if (error instanceof TuskSchemaError) return new HttpError(503, 'schema', error.message);
  if (error instanceof HTTPException) {
    const status = error.status as ContentfulStatusCode;
    return new HttpError(status, status === 413 ? 'too_large' : 'http', error.message || 'request refused');
  }
  if (error instanceof TuskError) return new HttpError(400, 'refused', error.message);
  const code = (error as { code?: string }).code;
  if (code === SQLSTATE.queryCanceled) {
    return new HttpError(
      503,
      'timeout',
      'the query ran past the statement timeout of lists and searches: narrow it (a tenant, queue or state) or ask again',
    );
  }
  if (code === SQLSTATE.undefinedTable || code === SQLSTATE.undefinedFunction || code === SQLSTATE.invalidSchemaName) {
    return new HttpError(
      503,
      'schema',
      `Tusk's schema is missing or out of date: run \`tusk migrate\` (${error.message})`,
    );
  }
  return new HttpError(500, 'internal', 'internal error (see the server log)');
}
