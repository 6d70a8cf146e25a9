import { z } from 'zod';
import type { Queryable } from '../db/queryable.js';
import { TuskError } from '../errors.js';
import { updateRetention } from '../queries/history.js';
import {
  selectDefaults,
  selectTenants,
  type TenantRow,
  type TenantSettings,
  updateDefaultSlots,
  upsertTenant,
} from '../queries/tenants.js';
import { describe, flagSchema, integer, nameSchema, parse } from '../validation/validate.js';
import { retentionSchema } from './retention.js';

/**
 * Why a tenant's jobs wait: `paused` (the tenant), `queue_paused` (some wait in paused
 * queues), `slots_full` (as many running as it has slots), `rate_limited` (no starts left
 * in the rate window, until `rateResetsAt`), `worker` (nothing of the above holds them:
 * they wait for a free worker of their queue), `scheduled` (scheduled or retrying jobs not
 * due yet, the first at `nextRunAt`).
 */
export const WAIT_REASONS = ['paused', 'queue_paused', 'slots_full', 'rate_limited', 'worker', 'scheduled'] as const;
/** Why a tenant's jobs wait (see WAIT_REASONS); `TenantInfo.waitReasons` lists them. */
export type WaitReason = (typeof WAIT_REASONS)[number];

/** A tenant's settings and its unfinished jobs. */
export interface TenantInfo {
  tenant: string;
  /** Slots in effect: its own, else the default; null means unlimited. */
  slots: number | null;
  /** Slots set on this tenant; null means the default applies. */
  ownSlots: number | null;
  /** Most running jobs per concurrency key; null for no limit. */
  perKey: number | null;
  paused: boolean;
  /** At most `limit` job starts (claims) per window of `perMs`; null for none. */
  rate: { limit: number; perMs: number } | null;
  /** How long its finished jobs are kept (PostgreSQL interval text); null: forever. */
  retention: string | null;
  /** Retention set on this tenant; null means the default applies. */
  ownRetention: string | null;
  running: number;
  /** Can run now, waiting for a slot or a worker. */
  available: number;
  scheduled: number;
  /** Failed an attempt, waiting to retry. */
  retrying: number;
  /** Age of the oldest job that could run now, in ms; null if none waits. */
  oldestWaitingMs: number | null;
  lastServedAt: Date | null;
  /** Why its jobs wait, in the order the claim checks; empty when none waits. */
  waitReasons: WaitReason[];
  /** The end of the current rate window, when starts are counted afresh; null without a rate. */
  rateResetsAt: Date | null;
  /** When the first of its scheduled or retrying jobs is due; null if none. */
  nextRunAt: Date | null;
}

const MAX_SLOTS = 1_000_000;
const limit = () => integer(1, MAX_SLOTS).nullable().optional();

/** Longest rate window: 31 days. */
const MAX_RATE_WINDOW_MS = 31 * 24 * 3600_000;
export const rateSchema = z
  .strictObject(
    {
      limit: integer(1, MAX_SLOTS),
      perMs: integer(1, MAX_RATE_WINDOW_MS),
    },
    { error: (issue) => `must be { limit, perMs } or null (got ${describe(issue.input)})` },
  )
  .nullable()
  .optional();

const settingsSchema = z.strictObject({
  slots: limit(),
  perKey: limit(),
  paused: flagSchema().optional(),
  rate: rateSchema,
  retention: retentionSchema.optional(),
});

const defaultsSchema = z.strictObject({ slots: limit(), retention: retentionSchema.optional() });

/** Settings of tenants that have none of their own. */
export interface TenantDefaults {
  /** Slots; null: unlimited (the initial default). */
  slots: number | null;
  /** How long finished jobs are kept; null: forever (the initial default). */
  retention: string | null;
}

const tenantName = nameSchema(128);

/**
 * Per-tenant settings: how many jobs a tenant may run at once (`slots`), how many per
 * concurrency key (`perKey`), how many may start per time window (`rate`), how long its
 * finished jobs are kept (`retention`), and pausing. Changes take effect on the next
 * claim.
 *
 * @example
 * await tusk.tenants.set('acme', { slots: 5, perKey: 2 });
 * await tusk.tenants.set('acme', { rate: { limit: 100, perMs: 60_000 } }); // 100 starts a minute
 * await tusk.tenants.setDefault({ retention: '30 days' }); // history of tenants without their own
 * await tusk.tenants.setDefault({ slots: 3 }); // tenants without their own slots
 * await tusk.tenants.pause('acme');            // running jobs finish; no new claims
 */
export class Tenants {
  readonly #db: () => Promise<Queryable>;
  readonly #schema: string;

  constructor(db: () => Promise<Queryable>, schema: string) {
    this.#db = db;
    this.#schema = schema;
  }

  /**
   * Creates the tenant or changes the given settings (others stay). `slots: null` and
   * `retention: null` go back to the default; `perKey: null` and `rate: null` remove
   * the limit.
   */
  async set(tenant: string, settings: TenantSettings): Promise<TenantInfo> {
    const name = parse(tenantName, tenant, 'tenant');
    const s = parse(settingsSchema, settings, 'settings') as TenantSettings;
    await upsertTenant(await this.#db(), this.#schema, name, s);
    const info = await this.get(name);
    // written just now: only a concurrent drop of the schema takes it away
    if (!info) throw new TuskError(`tenant ${JSON.stringify(name)} is gone right after being set`);
    return info;
  }

  /** A tenant; null if it has neither settings nor unfinished jobs. */
  async get(tenant: string): Promise<TenantInfo | null> {
    const name = parse(tenantName, tenant, 'tenant');
    const [row] = await selectTenants(await this.#db(), this.#schema, name);
    if (!row) return null;
    return toTenantInfo(row);
  }

  /** Every tenant that has settings or unfinished jobs. */
  async list(): Promise<TenantInfo[]> {
    return (await selectTenants(await this.#db(), this.#schema, null)).map(toTenantInfo);
  }

  /** Stops new claims for the tenant; its running jobs go on. */
  pause(tenant: string): Promise<TenantInfo> {
    return this.set(tenant, { paused: true });
  }

  /** Lets claims take the tenant's jobs again after `pause`. */
  resume(tenant: string): Promise<TenantInfo> {
    return this.set(tenant, { paused: false });
  }

  /** Settings of tenants without their own: slots (null: unlimited), retention (null: forever). */
  async getDefault(): Promise<TenantDefaults> {
    return selectDefaults(await this.#db(), this.#schema);
  }

  /**
   * Changes the given defaults (others stay). Retention applies to the finished jobs of
   * every tenant without its own; worker upkeep (or `tusk.prune()`) removes older ones.
   */
  async setDefault(settings: { slots?: number | null; retention?: string | null }): Promise<TenantDefaults> {
    const s = parse(defaultsSchema, settings, 'settings');
    const db = await this.#db();
    if (s.slots !== undefined) await updateDefaultSlots(db, this.#schema, s.slots);
    if (s.retention !== undefined) await updateRetention(db, this.#schema, null, s.retention);
    return this.getDefault();
  }
}

/** Why a tenant's jobs wait, from its settings and counts (see WaitReason). */
function waitReasons(row: TenantRow): WaitReason[] {
  const reasons: WaitReason[] = [];
  if (row.available > 0) {
    if (row.paused) reasons.push('paused');
    if (row.available_paused_queues > 0) reasons.push('queue_paused');
    if (row.slots !== null && row.running >= row.slots) reasons.push('slots_full');
    if (row.rate_left === 0) reasons.push('rate_limited');
    const held = row.paused || reasons.includes('slots_full') || reasons.includes('rate_limited');
    if (!held && row.available > row.available_paused_queues) reasons.push('worker');
  }
  if (row.scheduled + row.retrying > 0) reasons.push('scheduled');
  return reasons;
}

export function toTenantInfo(row: TenantRow): TenantInfo {
  return {
    tenant: row.tenant,
    slots: row.slots,
    ownSlots: row.own_slots,
    perKey: row.per_key,
    paused: row.paused,
    rate: row.rate_limit === null ? null : { limit: row.rate_limit, perMs: row.rate_per_ms as number },
    retention: row.retention,
    ownRetention: row.own_retention,
    running: row.running,
    available: row.available,
    scheduled: row.scheduled,
    retrying: row.retrying,
    oldestWaitingMs: row.oldest_waiting_ms,
    lastServedAt: row.last_served_at,
    waitReasons: waitReasons(row),
    rateResetsAt: row.rate_resets_at,
    nextRunAt: row.next_run_at,
  };
}
