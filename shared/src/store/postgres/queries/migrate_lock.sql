-- Serializes migrations across replicas; released when the transaction ends.
SELECT pg_advisory_xact_lock($1)
