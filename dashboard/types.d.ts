// Types for the dashboard's JSDoc (its .js files `@import` them). The API's answers are
// the server's own response schemas: a change there that the pages do not follow fails
// `npm run typecheck`. Not served: the server sends only .html, .js, .css and .svg files.
import type { z } from 'zod';
import type * as api from '../src/http/schemas.js';

export type Job = z.output<typeof api.jobSchema>;
export type JobSummary = z.output<typeof api.jobSummarySchema>;
export type JobList = z.output<typeof api.jobListSchema>;
export type JobState = Job['state'];
export type Tenant = z.output<typeof api.tenantSchema>;
export type WaitReason = Tenant['waitReasons'][number];
export type Stats = z.output<typeof api.statsSchema>;
export type Counts = Stats['total']['counts'];
export type Worker = z.output<typeof api.workerSchema>;
export type RecordedTask = z.output<typeof api.recordedTaskListSchema>['tasks'][number];
export type Timeseries = z.output<typeof api.timeseriesSchema>;
export type Whoami = z.output<typeof api.whoamiSchema>;
export type PausedQueues = z.output<typeof api.pausedQueuesSchema>;
export type Schedule = z.output<typeof api.scheduleSchema>;

/** What `h()` takes as children: nodes and text; null, undefined and false are left out. */
export type Child = Node | string | number | null | undefined | false | readonly Child[];

/** Attributes and properties of `h()`; `on…` are event listeners. */
export interface Props {
  class?: string | null;
  /** Set through the CSSOM, which the page's CSP allows (unlike a style attribute). */
  style?: string;
  dataset?: Record<string, string>;
  onclick?: (event: MouseEvent) => unknown;
  onsubmit?: (event: SubmitEvent) => unknown;
  onchange?: (event: Event) => unknown;
  oninput?: (event: Event) => unknown;
  [name: string]: unknown;
}

/** The head of a page: its title, what it shows, and its actions on the right. */
export interface Head {
  title: Child;
  /** Before the title: a link back. */
  back?: { href: string; label: string };
  /** After the title: a line saying what the page shows, or nodes (a badge...). */
  sub?: Child;
  actions?: Child;
  /** The actions as one segmented control. */
  segmented?: boolean;
}

/** What the app gives each view. */
export interface Context {
  params: URLSearchParams;
  who: Whoami;
  toast(message: string, error?: boolean): void;
  navigate(hash: string): void;
}

/** A page of the dashboard: its element, and `refresh` to bring it up to date. */
export interface View {
  el: HTMLElement;
  refresh(): Promise<void>;
}

declare global {
  interface Window {
    /** uPlot, loaded by index.html as a classic script. */
    uPlot: typeof import('uplot');
  }
}
