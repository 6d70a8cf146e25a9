/** Renders rows as an aligned text table; numbers are right-aligned. */
export function renderTable(headers: string[], rows: Array<Array<string | number | null>>): string {
  const cells = rows.map((row) => row.map((c) => (c === null ? '-' : String(c))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const numeric = headers.map((_, i) => rows.every((r) => r[i] === null || typeof r[i] === 'number'));
  const line = (r: string[]) =>
    r
      .map((c, i) => (numeric[i] ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '─'.repeat(w))), ...cells.map(line)].join('\n');
}
