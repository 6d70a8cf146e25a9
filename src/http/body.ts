import { HttpError } from './errors.js';

/** Largest bodies, in bytes: of every write, and of `{ jobs: [...] }` (enqueue many). */
export interface BodyLimits {
  maxBytes: number;
  /** For `POST /api/jobs` bodies that start `{"jobs":`. */
  maxBatchBytes?: number;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
/** The start of an enqueue-many body (after a byte order mark, in the first bytes). */
const BATCH = /^(?:\xef\xbb\xbf)?\s*\{\s*"jobs"\s*:/;
const START_BYTES = 64;
/** Most bytes of a refused body read and dropped. */
const DISCARD_BYTES = 64 * 1024 * 1024;

/**
 * A request body as text, refused (413) as soon as it is known to be over its limit:
 * from Content-Length before a byte is read, else while it streams in. Nothing is parsed
 * here, and no more than a chunk over the limit is held: parsing a body of the limit's
 * size is the longest the event loop can be held. A body that starts `{"jobs":` may be as
 * large as `maxBatchBytes`; the others, `maxBytes`. An upload the client cut off is an
 * HttpError of code `aborted` (logged at debug level).
 */
export async function readText(request: Request, limits: BodyLimits): Promise<string> {
  const single = limits.maxBytes;
  const batch = Math.max(limits.maxBatchBytes ?? single, single);
  const tooLarge = () =>
    new HttpError(
      413,
      'too_large',
      `body: over the limit of ${single} bytes${batch > single ? ` (${batch} for enqueue many: { jobs: [...] })` : ''}`,
      'body',
    );
  const declared = Number(request.headers.get('content-length') ?? Number.NaN);
  if (declared > batch && !request.headers.has('transfer-encoding')) throw tooLarge();
  const chunks: Uint8Array[] = [];
  let size = 0;
  /** Whether the body is enqueue many: known once it passes the single limit. */
  let many: boolean | null = null;
  const reader = request.body?.getReader();
  while (reader) {
    const next = await reader.read().catch((error: Error) => {
      throw new HttpError(400, 'aborted', `body: the upload was cut off (${error.message})`, 'body');
    });
    if (next.done) break;
    chunks.push(next.value);
    size += next.value.byteLength;
    if (size > single) {
      many ??= BATCH.test(Buffer.concat(chunks).subarray(0, START_BYTES).toString('latin1'));
      if (!many || size > batch) {
        discard(reader);
        throw tooLarge();
      }
    }
  }
  try {
    return utf8.decode(Buffer.concat(chunks, size));
  } catch {
    throw new HttpError(400, 'invalid', 'body: not valid UTF-8', 'body');
  }
}

/**
 * Reads and drops the rest of a refused body. Closing the connection with bytes unread
 * would make the kernel reset it, and the client could lose the 413 with it; the server
 * closes it soon after the answer anyway (a body that never ends is not read for long).
 */
function discard(reader: ReadableStreamDefaultReader<Uint8Array>): void {
  void (async () => {
    for (let left = DISCARD_BYTES; left > 0; ) {
      const next = await reader.read();
      if (next.done) return;
      left -= next.value.byteLength;
    }
    await reader.cancel();
  })().catch(() => {});
}
