import { expect, it } from 'vitest';
import { QUICK, renderReport, runChaos } from '../chaos/chaos.js';

// The short chaos run (npm run chaos -- --quick): worker processes SIGKILLed every second,
// one's connections terminated, PostgreSQL restarted, one frozen past its lease — on an
// embedded server of its own, so the restart disturbs no other test.
it('chaos: nothing lost, one success per job, re-runs only for jobs in hand at a fault, slots held', async () => {
  const report = await runChaos({ ...QUICK, dir: '.tusk/chaos-test-pg', schema: 'chaos_test' });
  console.log(renderReport(report, QUICK));
  expect(report.failures).toEqual([]);
  expect(report.faults.filter((f) => f.type === 'kill').length).toBeGreaterThan(3);
  expect(new Set(report.faults.map((f) => f.type))).toEqual(new Set(['kill', 'terminate', 'restart', 'stop']));
}, 600_000);
