// `npm run stress`: the active drainer's connection terminated in the middle of a send, 50
// times over, with a sink deaf to the signal and with one that stops on it.
import { afterAll, describe, expect, it } from 'vitest';
import { lostMidSend } from './drain-race.js';
import { useTestDb } from './helpers.js';

const RUNS = 50;
const db = useTestDb(import.meta.url);
const results: string[] = [];
afterAll(() => console.log(results.join('\n')));

async function everyRun(label: string, options: Parameters<typeof lostMidSend>[2]) {
  const failed: string[] = [];
  for (let trial = 1; trial <= RUNS; trial++) {
    try {
      await lostMidSend(db, trial, options);
    } catch (error) {
      failed.push((error as Error).message.split('\n')[0] ?? '');
    }
  }
  results.push(`${label}: ${RUNS - failed.length} of ${RUNS} runs with one send at a time and nothing lost`);
  expect(failed, `${failed.length} of ${RUNS} runs went wrong`).toEqual([]);
}

describe(`a drainer losing its connection mid-send, ${RUNS} runs each`, () => {
  it('its sink deaf to the signal', () =>
    everyRun('sink deaf to the signal', { sendMs: 300, sendTimeoutMs: 500, honorsSignal: false }));
  it('its sink stopping on the signal', () =>
    everyRun('sink stopping on the signal', { sendMs: 60_000, sendTimeoutMs: 500, honorsSignal: true }));
});
