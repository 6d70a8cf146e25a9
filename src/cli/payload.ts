import { TuskValidationError } from '../errors.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A JSON argument (`tusk enqueue`'s payload, `--payload`): the text itself, or with `-`
 * standard input (for payloads too big for a command line, about 128 KiB on Linux).
 * Throws a TuskValidationError naming `field` for text that is not JSON or not UTF-8.
 */
export async function jsonArgument(text: string, field: string): Promise<unknown> {
  let json = text;
  if (text === '-') {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    try {
      json = utf8.decode(Buffer.concat(chunks));
    } catch {
      throw new TuskValidationError(field, 'is not valid UTF-8 (read from standard input)');
    }
  }
  try {
    return JSON.parse(json);
  } catch (error) {
    throw new TuskValidationError(field, `is not valid JSON: ${(error as Error).message}`);
  }
}
