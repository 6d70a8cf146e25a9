import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Files that load the machine (fault injection, process fleets): run after all the others. */
const LAST = ['/drain-crash.test.ts', '/flows-crash.test.ts', '/crash.test.ts'];

/**
 * Runs the fault-injection files last, so that the other files do not share the two cores
 * with a fleet of worker processes and PostgreSQL restarts (their waits stay short).
 */
export default class FaultsLast extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const last = (spec: TestSpecification) => LAST.some((name) => spec.moduleId.endsWith(name));
    return [...sorted.filter((spec) => !last(spec)), ...sorted.filter(last)];
  }
}
