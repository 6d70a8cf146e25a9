// @ts-check
// Time charts drawn by uPlot (loaded as a global by index.html).
import { clock } from './dom.js';

/** @import uPlot from 'uplot' */

/** @type {(name: string) => string} */
const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

/**
 * @param {string} color `#rrggbb`
 * @param {number} alpha
 */
function withAlpha(color, alpha) {
  const m = /^#([0-9a-f]{6})$/i.exec(color);
  if (!m) return color;
  const n = Number.parseInt(m[1] ?? '', 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

/**
 * A time chart in `el`. `series`: `[{ label, color: '--css-var', fill? }]`; `format`
 * renders a y value. Returns `update(times, ...columns)`, times in ms since the epoch.
 * @param {HTMLElement} el
 * @param {{
 *   series: { label: string, color: string, fill?: boolean, spanGaps?: boolean }[],
 *   format: (value: number) => string,
 *   height?: number,
 * }} options
 * @returns {(times: number[], ...columns: (number | null)[][]) => void}
 */
export function timeChart(el, { series, format, height = 220 }) {
  const muted = cssVar('--muted');
  const line = cssVar('--line');
  /** @type {uPlot.Axis} */
  const axis = {
    stroke: muted,
    grid: { stroke: line, width: 1 },
    ticks: { stroke: line, width: 1 },
    font: '11px system-ui',
  };
  const chart = new window.uPlot(
    {
      width: Math.max(el.clientWidth, 300),
      height,
      cursor: { drag: { x: false, y: false }, points: { size: 6 } },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      series: [
        {
          value: (_u, v) => (v === null ? '—' : clock(new Date(v * 1000), false)),
        },
        ...series.map(
          (s) =>
            /** @type {uPlot.Series} */ ({
              label: s.label,
              stroke: cssVar(s.color),
              width: 2,
              fill: s.fill ? withAlpha(cssVar(s.color), 0.12) : undefined,
              points: { show: false },
              spanGaps: s.spanGaps ?? false,
              value: (_u, v) => (v === null || v === undefined ? '—' : format(v)),
            }),
        ),
      ],
      axes: [axis, { ...axis, size: 64, values: (_u, ticks) => ticks.map(format) }],
    },
    [[], ...series.map(() => [])],
    el,
  );
  new ResizeObserver(() => chart.setSize({ width: Math.max(el.clientWidth, 300), height })).observe(el);
  return (times, ...columns) => chart.setData([times.map((t) => t / 1000), ...columns]);
}
