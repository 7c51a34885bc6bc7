-- Gateways are registered under the token that polled, count in the fleet
-- only while they also report, and report at a bounded rate.
ALTER TABLE gateways ADD COLUMN token text NOT NULL DEFAULT '';
-- NULL until the gateway's first report.
ALTER TABLE gateways ADD COLUMN last_report timestamptz;
-- A token bucket of reports: credit at credit_at, refilled at the
-- service's report rate.
ALTER TABLE gateways ADD COLUMN report_credit double precision NOT NULL DEFAULT 0;
ALTER TABLE gateways ADD COLUMN credit_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX gateways_token_seen ON gateways (token, last_seen);

-- An endpoint whose path is matched with its case as written.
ALTER TABLE endpoints ADD COLUMN case_sensitive boolean NOT NULL DEFAULT false;

-- Whether a decided canary's refusal rate was compared with the rest's:
-- false for one promoted at the end of its window without enough
-- requests on a side; NULL for rollouts that had no canary.
ALTER TABLE rollouts ADD COLUMN compared boolean;
