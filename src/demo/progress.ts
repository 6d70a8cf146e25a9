/**
 * A progress display for long runs: one line redrawn in place on a terminal, a plain
 * line every `plainEveryMs` otherwise (CI logs).
 */
export class Progress {
  readonly #out: NodeJS.WriteStream;
  readonly #tty: boolean;
  readonly #plainEveryMs: number;
  #lastPlain = 0;
  #drawn = false;

  constructor(out: NodeJS.WriteStream = process.stderr, plainEveryMs = 2000) {
    this.#out = out;
    this.#tty = Boolean(out.isTTY);
    this.#plainEveryMs = plainEveryMs;
  }

  update(line: string): void {
    if (this.#tty) {
      this.#out.write(`\r\x1b[2K${line}`);
      this.#drawn = true;
    } else if (Date.now() - this.#lastPlain >= this.#plainEveryMs) {
      this.#lastPlain = Date.now();
      this.#out.write(`${line}\n`);
    }
  }

  done(line: string): void {
    this.#out.write(this.#tty && this.#drawn ? `\r\x1b[2K${line}\n` : `${line}\n`);
    this.#drawn = false;
  }
}

/** `[██████░░░░] ` for a fraction in [0, 1]. */
export function bar(fraction: number, width = 24): string {
  const full = Math.round(Math.max(0, Math.min(1, fraction)) * width);
  return `[${'█'.repeat(full)}${'░'.repeat(width - full)}]`;
}
