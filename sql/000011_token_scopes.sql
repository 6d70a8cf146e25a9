-- Token scopes: what a token may do, on top of whose jobs it sees (its tenant's, or with
-- no tenant every tenant's). A tenant token that may only enqueue and read its jobs cannot
-- lease or complete them; a worker's token may lease but not enqueue.
--
--   enqueue, read, manage (cancel, retry), lease (fetch, ack, nack, extend): any token;
--   metrics, admin: tokens without a tenant only (they reach every tenant).
--
-- Tokens made before keep what they could do: admin without a tenant, everything on their
-- tenant's jobs with one.
ALTER TABLE :SCHEMA.api_tokens ADD COLUMN scopes text[];

UPDATE :SCHEMA.api_tokens
SET scopes = CASE WHEN tenant IS NULL THEN ARRAY['admin'] ELSE ARRAY['enqueue', 'read', 'manage', 'lease'] END;

ALTER TABLE :SCHEMA.api_tokens
  ALTER COLUMN scopes SET NOT NULL,
  ADD CONSTRAINT api_tokens_scopes_known
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['enqueue', 'read', 'manage', 'lease', 'metrics', 'admin']),
  ADD CONSTRAINT api_tokens_scopes_of_tenant
    CHECK (tenant IS NULL OR NOT scopes && ARRAY['metrics', 'admin']);
