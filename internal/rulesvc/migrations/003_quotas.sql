-- A rule's daily and monthly quotas (issue 22), beside its limits:
-- [{"name":"daily","count":10000,"per":"day","zone":"Europe/Berlin"}].
ALTER TABLE rules ADD COLUMN quotas jsonb NOT NULL DEFAULT '[]';
-- A rule's concurrency limit: the most requests of a key in flight; 0 for none.
ALTER TABLE rules ADD COLUMN concurrency bigint NOT NULL DEFAULT 0;
