/**
 * Weighted queue choice: a worker given `[['critical', 8], ['default', 1]]`
 * serves critical about 8 times as often as default while both have work, and whichever
 * has work when the other is empty.
 */

/** A queue and its weight (> 0). */
export type WeightedQueue = readonly [name: string, weight: number];

/**
 * Orders queues by weighted random sampling without replacement (Efraimidis–Spirakis:
 * each queue gets the key u^(1/w) for a uniform u; the largest key goes first). The first
 * is the queue picked for a fetch; the rest are where to go on when it is empty.
 */
export function sampleOrder(queues: readonly WeightedQueue[], random: () => number = Math.random): string[] {
  return queues
    .map(([name, weight]) => ({ name, key: random() ** (1 / weight) }))
    .sort((a, b) => b.key - a.key)
    .map((q) => q.name);
}

/**
 * How many of `n` job slots each queue gets in one fetch: its share of the weights rounded
 * down, and the slots left over go to queues drawn by `sampleOrder`. A one-slot fetch is
 * thus a plain weighted pick; a big one splits almost exactly by weight, so
 * the served ratio holds over a run however large the fetches. Returns [queue, count] in
 * descending count, then weight.
 */
export function splitByWeight(
  queues: readonly WeightedQueue[],
  n: number,
  random: () => number = Math.random,
): Array<[string, number]> {
  if (n <= 0) return [];
  if (queues.length === 1) return [[queues[0]?.[0] as string, n]];
  const total = queues.reduce((sum, [, w]) => sum + w, 0);
  const counts = new Map<string, number>(queues.map(([name, w]) => [name, Math.floor((n * w) / total)]));
  let left = n - [...counts.values()].reduce((a, b) => a + b, 0);
  for (const name of sampleOrder(queues, random)) {
    if (left-- <= 0) break;
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  const weight = new Map(queues);
  return [...counts.entries()]
    .filter(([, count]) => count > 0)
    .sort((a, b) => b[1] - a[1] || (weight.get(b[0]) ?? 0) - (weight.get(a[0]) ?? 0));
}

/** True when all weights are equal: the queues are then served together, in one claim. */
export function equalWeights(queues: readonly WeightedQueue[]): boolean {
  return queues.every(([, w]) => w === queues[0]?.[1]);
}
