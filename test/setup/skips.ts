import type { Reporter, TestModule } from 'vitest/node';

/**
 * Lists, at the end of the run, the tests skipped for a missing service, grouped by the
 * reason (`ctx.skip(reason)`, see test/services.ts), so that a pass on a machine without
 * Chromium or Redis says what it did not check.
 */
export default class SkipsReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const byReason = new Map<string, string[]>();
    let silent = 0;
    for (const module of modules) {
      for (const test of module.children.allTests()) {
        const result = test.result();
        if (result.state !== 'skipped') continue;
        if (!result.note) {
          silent++;
          continue;
        }
        const names = byReason.get(result.note) ?? [];
        names.push(`${module.relativeModuleId} › ${test.fullName}`);
        byReason.set(result.note, names);
      }
    }
    if (byReason.size === 0 && silent === 0) return;
    const lines = ['', 'Skipped tests:'];
    for (const [reason, names] of byReason) {
      lines.push(`  ${names.length} for ${reason}:`);
      for (const name of names) lines.push(`    - ${name}`);
    }
    if (silent > 0) lines.push(`  ${silent} left out by a filter or marked skip`);
    console.log(lines.join('\n'));
  }
}
