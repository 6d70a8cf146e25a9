import { describe, expect, it } from 'vitest';
import type { ClaimedRow } from '../../src/queries/claimJobs.js';
import { ActiveJob } from '../../src/worker/activeJob.js';
import { HeldJobs } from '../../src/worker/heldJobs.js';

const counters = () => ({ claimed: 0, succeeded: 0, retried: 0, dead: 0, cancelled: 0, lost: 0 });
const job = (id: string, claimSentAt: number) =>
  new ActiveJob({ id, lease_token: '1', payload: null } as unknown as ClaimedRow, claimSentAt, claimSentAt, 1e9);

describe('HeldJobs: cancels heard before the claim answered', () => {
  it('a cancel heard after the claim was sent holds the job back when the claim answers; one heard before does not', () => {
    const held = new HeldJobs(counters(), () => {});
    expect(held.cancelHeard('7', 100)).toBe(false);
    const late = job('7', 50);
    held.add(late);
    expect(late.cancelHeardAt).toBeGreaterThan(0);
    const early = job('7', 150);
    held.add(early);
    expect(early.cancelHeardAt).toBe(0);
  });

  it('notifications that are not job ids are not remembered: a flood of them does not push out a real one', () => {
    const held = new HeldJobs(counters(), () => {});
    held.cancelHeard('42', 100);
    // anyone may NOTIFY: long payloads, as many as the memory's bound and more
    const junk = 'x'.repeat(7_900);
    for (let i = 0; i < 10_001; i++) held.cancelHeard(`${junk}${i}`, 101);
    const claimed = job('42', 50);
    held.add(claimed);
    expect(claimed.cancelHeardAt).toBeGreaterThan(0);
  });
});
