-- Staged jobs get a key unique across installs: a random space drawn once per schema.
--
-- A staged job's id comes from the schema's own identity, which starts again at 1 in every
-- new schema. The BullMQ sink's idempotent ids were `staged-<id>`: two schemas draining
-- into one BullMQ queue, or a schema dropped and made again while BullMQ kept the old jobs
-- (it keeps completed ones by default), gave different jobs the same id, and BullMQ took
-- the second for a copy of the first and dropped it, while the drainer, told it was added,
-- deleted it: a job lost without a word. Now each schema draws a random key space when it
-- is made (for an existing one, when this migration runs), and a staged job's key is the
-- space and its id (StagedJob.key), which the BullMQ sink's ids use. A batch sent before
-- the upgrade and again after it (a crash in between) is added twice: once per id form.
ALTER TABLE :SCHEMA.drainer_lease
  ADD COLUMN key_space text NOT NULL DEFAULT md5(random()::text || clock_timestamp()::text);
