import { describe, expect, it } from 'vitest';
import type { ClaimedRow } from '../../src/queries/claimJobs.js';
import { ActiveJob } from '../../src/worker/activeJob.js';

const job = () => new ActiveJob({ id: '1', lease_token: '1', payload: null } as unknown as ClaimedRow, 0, 0, 0);

describe('ActiveJob.step', () => {
  it('an aborted attempt begins no step: it rejects with the abort, and no work runs to reject unheard', async () => {
    const attempt = job();
    const stopping = new Error('stopping');
    attempt.abort(stopping);
    let begun = false;
    const step = attempt.step(() => {
      begun = true;
      return Promise.reject(new Error('validation failed'));
    });
    await expect(step).rejects.toBe(stopping);
    expect(begun).toBe(false);
  });

  it('a step under way is ended by the abort; its late result is ignored', async () => {
    const attempt = job();
    let settle!: (v: string) => void;
    const step = attempt.step(() => new Promise<string>((resolve) => (settle = resolve)));
    const timeout = new Error('timeout');
    attempt.abort(timeout);
    await expect(step).rejects.toBe(timeout);
    settle('late');
  });
});
