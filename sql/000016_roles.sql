-- Least-privilege roles (created by `tusk roles create`, see src/queries/roles.ts):
--   <prefix>_producer  enqueues and reads jobs: INSERT and SELECT on jobs, SELECT on history
--   <prefix>_worker    a consumer in any language: the lease functions only, no table
--   <prefix>_api       the HTTP server: every table but api_tokens, every function
-- What makes them minimal: the functions below run as the schema's owner (SECURITY
-- DEFINER, search_path pinned, every name schema-qualified) and only the roles granted
-- them may call them — PostgreSQL lets PUBLIC execute a new function, so that is revoked.
-- A later migration that restates one of these functions must restate SECURITY DEFINER
-- and its search_path: CREATE OR REPLACE resets them.

-- The lease API: a worker role holds no privilege on any table.
ALTER FUNCTION :SCHEMA.fetch_jobs(integer, integer, text, text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :SCHEMA.ack_job(bigint, bigint, jsonb) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :SCHEMA.nack_job(bigint, bigint, integer, jsonb) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :SCHEMA.extend_lease(bigint, bigint, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- Deduplicated enqueue: a producer need not UPDATE jobs (an expired key is given up here).
ALTER FUNCTION :SCHEMA.enqueue_dedup(jsonb) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- Enqueue from SQL: a producer calls these (its INSERT privilege is for the library's own path).
ALTER FUNCTION :SCHEMA.enqueue_job(text, jsonb, jsonb) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :SCHEMA.enqueue_jobs(jsonb) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- History partitions are DDL: done as the owner, whoever runs the upkeep.
ALTER FUNCTION :SCHEMA.ensure_history_partitions(integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :SCHEMA.maintain_history(integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :SCHEMA.prune_history(integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- API tokens: the server checks them through these two; api_tokens itself is the owner's.
CREATE FUNCTION :SCHEMA.find_token(p_hash bytea)
RETURNS TABLE (id integer, tenant text, scopes text[]) LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH t AS (
    SELECT a.id, a.tenant, a.scopes, a.last_used_at FROM :SCHEMA.api_tokens a
    WHERE a.token_hash = p_hash AND a.revoked_at IS NULL),
  touched AS (  -- its use noted at most once a minute: busy clients do not write on every request
    UPDATE :SCHEMA.api_tokens a SET last_used_at = now() FROM t
    WHERE a.id = t.id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'))
  SELECT t.id, t.tenant, t.scopes FROM t
$$;

CREATE FUNCTION :SCHEMA.live_token_hashes()
RETURNS SETOF bytea LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.token_hash FROM :SCHEMA.api_tokens a WHERE a.revoked_at IS NULL
$$;

REVOKE EXECUTE ON FUNCTION
  :SCHEMA.fetch_jobs(integer, integer, text, text),
  :SCHEMA.ack_job(bigint, bigint, jsonb),
  :SCHEMA.nack_job(bigint, bigint, integer, jsonb),
  :SCHEMA.extend_lease(bigint, bigint, integer),
  :SCHEMA.enqueue_dedup(jsonb),
  :SCHEMA.enqueue_job(text, jsonb, jsonb),
  :SCHEMA.enqueue_jobs(jsonb),
  :SCHEMA.ensure_history_partitions(integer),
  :SCHEMA.maintain_history(integer),
  :SCHEMA.prune_history(integer),
  :SCHEMA.find_token(bytea),
  :SCHEMA.live_token_hashes()
FROM PUBLIC;
