-- The drainer's takeover guard.
--
-- One drainer is active: the one holding the drain lock, a session advisory lock on its
-- own connection. When that connection is lost (the backend terminated, the server
-- restarted, the network cut) the lock goes at once, but a send already handed to the
-- sink goes on in the drainer's process, out of the database's reach: neither a session
-- lock nor a lock taken per batch can stop it. Only time bounds it. So before each send
-- to a sink outside the database, the active drainer records here, by the database's
-- clock, when it will have given that send up (its send timeout), and clears it once the
-- batch is deleted; a drainer that takes the lock waits until then, and a margin, before
-- it sends. A clean stop, or a sink writing in the drainer's own transaction (whose writes
-- go with the connection), leaves nothing to wait for.
CREATE TABLE :SCHEMA.drainer_lease (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  busy_until timestamptz  -- NULL: no send to an outside sink can still be running
);
INSERT INTO :SCHEMA.drainer_lease DEFAULT VALUES;
