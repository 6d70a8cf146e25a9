// Task handler of the pressure run's workers: a short job that reports, once a second on
// stdout, how many jobs started and a histogram of their enqueue→start latency.
const BOUNDS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000, Infinity];
let counts = new Array(BOUNDS.length).fill(0);
let started = 0;

setInterval(() => {
  if (started === 0) return;
  process.stdout.write(`${JSON.stringify({ at: Date.now(), started, counts })}\n`);
  started = 0;
  counts = new Array(BOUNDS.length).fill(0);
}, 1000).unref();

export const tasks = {
  async work(payload) {
    const latency = Date.now() - payload.t;
    counts[BOUNDS.findIndex((b) => latency <= b)]++;
    started++;
    if (payload.ms) await new Promise((resolve) => setTimeout(resolve, payload.ms));
  },
};
