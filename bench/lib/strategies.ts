// The claim strategies Tusk is compared with in the fairness benchmark, on a table shaped
// like (jobs with a tenant and a status, tenant_queues with slots).

/** Tables for the comparison strategies, with the indexes most favourable to them. */
export const SEED_SCHEMA = (s: string) => `
  DROP SCHEMA IF EXISTS "${s}" CASCADE;
  CREATE SCHEMA "${s}";
  CREATE TABLE "${s}".jobs (
    id bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    status text NOT NULL DEFAULT 'created',
    args jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at timestamptz,
    finished_at timestamptz);
  CREATE INDEX ON "${s}".jobs (id) WHERE status = 'created';
  CREATE INDEX ON "${s}".jobs (tenant_id) WHERE status IN ('running', 'queued');
  CREATE TABLE "${s}".tenant_queues (tenant_id text PRIMARY KEY, num_slots integer NOT NULL);`;

/** claim, as published: skip tenants whose running jobs fill their slots. */
export const SEED_CLAIM = (s: string) => `
  WITH running_jobs_per_queue AS (
    SELECT tenant_id, count(1) AS running_jobs FROM "${s}".jobs
    WHERE (status = 'running' OR status = 'queued') AND created_at > now() - interval '6 hours'
    GROUP BY 1),
  full_queues AS (
    SELECT r.tenant_id FROM running_jobs_per_queue r
    LEFT JOIN "${s}".tenant_queues q ON r.tenant_id = q.tenant_id
    WHERE r.running_jobs >= q.num_slots)
  SELECT id FROM "${s}".jobs
  WHERE status = 'created' AND tenant_id NOT IN (SELECT tenant_id FROM full_queues)
  ORDER BY id ASC FOR UPDATE SKIP LOCKED LIMIT 1`;

/** Plain global FIFO: the oldest job of anyone, tenants ignored. */
export const FIFO_CLAIM = (s: string) => `
  SELECT id FROM "${s}".jobs WHERE status = 'created' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1`;
