-- The rules service's tables. Everything a gateway enforces is built from
-- rules, api_keys and endpoints; every change to them is one transaction
-- that also writes a snapshot, a rollout and an audit row.

CREATE TABLE rules (
	id          bigserial PRIMARY KEY,
	scope       text        NOT NULL,               -- default, ip, endpoint, plan, key
	match       jsonb       NOT NULL DEFAULT '{}',  -- {"plan":"pro","endpoint":"search"}
	limits      jsonb       NOT NULL,               -- [{"name":"s","rate":100,"per":"1s","burst":200,"algorithm":"gcra"}]
	mode        text        NOT NULL DEFAULT 'enforce',
	fail_mode   text        NOT NULL DEFAULT 'open',
	expires_at  timestamptz,
	reason      text        NOT NULL DEFAULT '',
	-- An emergency override, made through /admin/v1/overrides: it skips
	-- the canary. One per key.
	override    boolean     NOT NULL DEFAULT false,
	version     bigint      NOT NULL,               -- the snapshot that last changed it
	created_at  timestamptz NOT NULL DEFAULT now(),
	updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX rules_one_override_per_key ON rules ((match->>'key')) WHERE override;

CREATE TABLE api_keys (
	key         text PRIMARY KEY,
	plan        text        NOT NULL,
	org         text        NOT NULL DEFAULT '',
	updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE endpoints (
	name        text PRIMARY KEY,
	method      text        NOT NULL DEFAULT '',
	path        text        NOT NULL,
	cost        bigint      NOT NULL DEFAULT 0,
	updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Snapshot versions come from one sequence, so they order every change
-- made through any replica.
CREATE SEQUENCE snapshot_version;

CREATE TABLE snapshots (
	version      bigint PRIMARY KEY,
	hash         text        NOT NULL,
	document     jsonb       NOT NULL,
	-- The rules of this snapshot that are emergency overrides, so that an
	-- override can be laid over the stable snapshot without the canary.
	override_ids bigint[]    NOT NULL DEFAULT '{}',
	created_at   timestamptz NOT NULL DEFAULT now()
);

-- One rollout per snapshot: canary, then promoted, halted or superseded.
CREATE TABLE rollouts (
	version     bigint PRIMARY KEY REFERENCES snapshots (version),
	state       text        NOT NULL,
	emergency   boolean     NOT NULL DEFAULT false,
	canaries    text[]      NOT NULL DEFAULT '{}',
	started_at  timestamptz NOT NULL DEFAULT now(),
	decided_at  timestamptz,
	reason      text        NOT NULL DEFAULT ''
);
CREATE INDEX rollouts_state ON rollouts (state, version);

CREATE TABLE audit (
	id       bigserial PRIMARY KEY,
	at       timestamptz NOT NULL DEFAULT now(),
	who      text        NOT NULL,
	action   text        NOT NULL,
	target   text        NOT NULL,
	before   jsonb,
	after    jsonb,
	version  bigint
);

-- The gateways subscribed to any replica; a row older than the gateway TTL
-- no longer counts.
CREATE TABLE gateways (
	id         text PRIMARY KEY,
	region     text        NOT NULL,
	version    bigint      NOT NULL DEFAULT 0,
	last_seen  timestamptz NOT NULL DEFAULT now()
);

-- What gateways report: decisions per snapshot version, for the canary.
CREATE TABLE decisions (
	gateway   text        NOT NULL,
	version   bigint      NOT NULL,
	requests  bigint      NOT NULL,
	refused   bigint      NOT NULL,
	at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_version_at ON decisions (version, at);

-- What shadow rules would have refused, per rule and key.
CREATE TABLE shadow_hits (
	rule_id   bigint      NOT NULL,
	version   bigint      NOT NULL,
	gateway   text        NOT NULL,
	key       text        NOT NULL,
	hits      bigint      NOT NULL,
	at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX shadow_hits_at ON shadow_hits (at);
