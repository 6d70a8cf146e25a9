import type { Metric } from 'prom-client';

interface Series {
  labels: Record<string, string>;
  /** Observations per bucket (not cumulative); the last one is over every bound. */
  buckets: number[];
  sum: number;
  count: number;
}

const seriesKey = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).sort());

/**
 * A Prometheus histogram fed with counts per bucket rather than one observation at a
 * time: the database counts a scrape's finished jobs per bucket, and this adds them up.
 * prom-client's Histogram only takes single observations, so this is a metric of its
 * own that prom-client's registry renders like any other.
 */
export class CountedHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #series = new Map<string, Series>();

  constructor(
    readonly name: string,
    readonly help: string,
    /** Upper bounds, ascending, in the unit of the metric. */
    readonly bounds: number[],
  ) {}

  /** Drops the series of these labels. */
  remove(labels: Record<string, string>): void {
    this.#series.delete(seriesKey(labels));
  }

  /** Adds `n` observations falling in bucket `bucket` (0..bounds.length), summing to `sum`. */
  add(labels: Record<string, string>, bucket: number, n: number, sum: number): void {
    const key = seriesKey(labels);
    let series = this.#series.get(key);
    if (!series) {
      series = { labels, buckets: new Array(this.bounds.length + 1).fill(0), sum: 0, count: 0 };
      this.#series.set(key, series);
    }
    const i = Math.min(Math.max(bucket, 0), this.bounds.length);
    series.buckets[i] = (series.buckets[i] ?? 0) + n;
    series.sum += sum;
    series.count += n;
  }

  /** The metric as prom-client's registry reads it. */
  async get() {
    const values = [];
    for (const s of this.#series.values()) {
      let cumulative = 0;
      for (const [i, le] of [...this.bounds, '+Inf'].entries()) {
        cumulative += s.buckets[i] ?? 0;
        values.push({ metricName: `${this.name}_bucket`, labels: { ...s.labels, le }, value: cumulative });
      }
      values.push({ metricName: `${this.name}_sum`, labels: s.labels, value: s.sum });
      values.push({ metricName: `${this.name}_count`, labels: s.labels, value: s.count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** For `registry.registerMetric`, whose type lists prom-client's own classes only. */
  asMetric(): Metric {
    return this as unknown as Metric;
  }
}
