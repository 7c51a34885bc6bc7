-- A rule's daily and monthly quotas (issue 22), beside its limits:
-- [{"name":"daily","count":10000,"per":"day","zone":"Europe/Berlin"}].
ALTER TABLE rules ADD COLUMN quotas jsonb NOT NULL DEFAULT '[]';
