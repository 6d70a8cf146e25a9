import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** A tenant's settings and its jobs right now. */
export interface TenantRow {
  tenant: string;
  own_slots: number | null;
  slots: number | null;
  per_key: number | null;
  paused: boolean;
  rate_limit: number | null;
  rate_per_ms: number | null;
  own_retention: string | null;
  retention: string | null;
  last_served_at: Date | null;
  running: number;
  available: number;
  scheduled: number;
  retrying: number;
  oldest_waiting_ms: number | null;
  /** Available jobs in paused queues. */
  available_paused_queues: number;
  /** Starts left in the current rate window; null without a rate limit. */
  rate_left: number | null;
  /** When the current rate window ends; null without a rate limit. */
  rate_resets_at: Date | null;
  /** The earliest run time of its scheduled and retrying jobs. */
  next_run_at: Date | null;
}

/**
 * Tenants with their settings and counts of unfinished jobs: every tenant that has a row
 * or unfinished jobs, or just `tenant` if given. Counts scan the unfinished jobs. The starts
 * left come from rate_left, the function the claim itself uses.
 */
export async function selectTenants(db: Queryable, schema: string, tenant: string | null): Promise<TenantRow[]> {
  const { rows } = await db.query<TenantRow>(tenantsSql(schema), [tenant]);
  return rows;
}

/**
 * The statement of `selectTenants` ($1: a tenant or null). Its one config row is read with
 * LIMIT 1: the planner, not knowing a new schema's config holds one row (never analyzed,
 * 1 540 estimated), put the list at a cost of 9 million and compiled it with JIT, 4 s for
 * a query of 1 ms; the dashboard's tenants page never drew on a busy machine.
 */
export function tenantsSql(schema: string): string {
  const s = ident(schema);
  return `WITH counts AS (
       SELECT tenant,
              count(*) FILTER (WHERE state = 'running')::integer AS running,
              count(*) FILTER (WHERE state = 'available')::integer AS available,
              count(*) FILTER (WHERE state = 'scheduled')::integer AS scheduled,
              count(*) FILTER (WHERE state = 'failed')::integer AS retrying,
              -- greatest() skips a null: without the CASE, no waiting job would read as 0 ms
              CASE WHEN count(*) FILTER (WHERE state = 'available') > 0
                THEN greatest(0, extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available')) * 1000)
                END::bigint AS oldest_waiting_ms,
              count(*) FILTER (WHERE state = 'available'
                AND queue IN (SELECT queue FROM ${s}.paused_queues))::integer AS available_paused_queues,
              min(run_at) FILTER (WHERE state IN ('scheduled', 'failed')) AS next_run_at
       FROM ${s}.jobs WHERE $1::text IS NULL OR tenant = $1 GROUP BY tenant)
     SELECT coalesce(t.tenant, n.tenant) AS tenant, t.slots AS own_slots,
            coalesce(t.slots, c.default_slots) AS slots, t.per_key, coalesce(t.paused, false) AS paused,
            t.rate_limit, t.rate_per_ms::float8 AS rate_per_ms, t.retention::text AS own_retention,
            coalesce(t.retention, c.retention)::text AS retention,
            nullif(${s}.served_at(t.tenant), '-infinity') AS last_served_at,
            coalesce(n.running, 0) AS running, coalesce(n.available, 0) AS available,
            coalesce(n.scheduled, 0) AS scheduled, coalesce(n.retrying, 0) AS retrying,
            n.oldest_waiting_ms::float8 AS oldest_waiting_ms,
            coalesce(n.available_paused_queues, 0) AS available_paused_queues,
            CASE WHEN t.rate_limit IS NOT NULL
              THEN (SELECT ${s}.rate_left(r, now()) FROM ${s}.tenants r WHERE r.tenant = t.tenant) END AS rate_left,
            CASE WHEN t.rate_limit IS NOT NULL
              THEN to_timestamp((${s}.rate_window(t.rate_per_ms, now()) + 1) * t.rate_per_ms / 1000.0) END
              AS rate_resets_at,
            n.next_run_at
     FROM (SELECT * FROM ${s}.tenants WHERE $1::text IS NULL OR tenant = $1) t
     FULL JOIN counts n ON n.tenant = t.tenant
     CROSS JOIN (SELECT default_slots, retention FROM ${s}.config LIMIT 1) c
     ORDER BY 1`;
}

/** Settings to change; undefined leaves a setting as it is, null resets it. */
export interface TenantSettings {
  slots?: number | null;
  perKey?: number | null;
  paused?: boolean;
  /** At most `limit` job starts per `perMs` window; null removes the limit. */
  rate?: { limit: number; perMs: number } | null;
  /** How long its finished jobs are kept, e.g. `'90 days'`; null: the default's. */
  retention?: string | null;
}

/**
 * Creates the tenant or changes the given settings (see set_tenant in sql/: it waits for
 * claims in flight that treat the tenant as unlimited). Takes effect on the next claim.
 */
export async function upsertTenant(
  db: Queryable,
  schema: string,
  tenant: string,
  settings: TenantSettings,
): Promise<void> {
  const s = ident(schema);
  // one statement, so one transaction: all the settings change or none
  await db.query(
    `SELECT ${s}.set_tenant($1, $2, $3, $4, $5, $6),
            CASE WHEN $7 THEN ${s}.set_tenant_rate($1, $8, $9) END,
            CASE WHEN $10 THEN ${s}.set_retention($1, $11::interval, $11 IS NULL) END`,
    [
      tenant,
      settings.slots ?? null,
      settings.slots === null,
      settings.perKey ?? null,
      settings.perKey === null,
      settings.paused ?? null,
      settings.rate !== undefined,
      settings.rate?.limit ?? null,
      settings.rate?.perMs ?? null,
      settings.retention !== undefined,
      settings.retention ?? null,
    ],
  );
}

/** Settings of tenants that have none of their own (null: unlimited, kept forever). */
export async function selectDefaults(
  db: Queryable,
  schema: string,
): Promise<{ slots: number | null; retention: string | null }> {
  const { rows } = await db.query<{ slots: number | null; retention: string | null }>(
    `SELECT default_slots AS slots, retention::text AS retention FROM ${ident(schema)}.config`,
  );
  return rows[0] ?? { slots: null, retention: null };
}

export async function updateDefaultSlots(db: Queryable, schema: string, slots: number | null): Promise<void> {
  await db.query(`SELECT ${ident(schema)}.set_default_slots($1)`, [slots]);
}
