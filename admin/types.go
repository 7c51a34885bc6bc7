package admin

import (
	"encoding/json"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

// RuleView is a stored rule as the admin API shows it.
type RuleView struct {
	rules.Rule
	// Override is true for an emergency override.
	Override bool `json:"override"`
	// Version is the snapshot that last changed the rule.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Published says where a change went.
type Published struct {
	// Version is the snapshot that holds the change, and everything before
	// it.
	Version int64 `json:"version"`
	// Rollout is "canary" or "promoted".
	Rollout string `json:"rollout"`
	// Emergency is the version that carries an emergency override to every
	// gateway at once while Version is still a canary; zero otherwise.
	Emergency int64 `json:"emergency_version,omitempty"`
}

// Changed is the answer to a change of one rule, override, key or
// endpoint: where it went and, but for a deletion, what is now stored.
type Changed[T any] struct {
	Snapshot Published `json:"snapshot"`
	After    *T        `json:"after,omitempty"`
}

// Validation is the answer of POST /admin/v1/rules/validate for a rule
// set that compiles.
type Validation struct {
	Valid bool `json:"valid"`
	// Hash is what the rule set's snapshot hash would be.
	Hash string `json:"hash"`
}

// Override is the body of PUT /admin/v1/overrides/{key}: an emergency limit
// of one API key. It must say why and when it ends, within the service's
// longest override (7 days unless configured otherwise).
type Override struct {
	Limits    []rules.Limit  `json:"limits"`
	ExpiresAt time.Time      `json:"expires_at"`
	Reason    string         `json:"reason"`
	FailMode  rules.FailMode `json:"fail_mode,omitempty"`
}

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	ID      int64           `json:"id"`
	At      time.Time       `json:"at"`
	Who     string          `json:"who"`
	Action  string          `json:"action"`
	Target  string          `json:"target"`
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
	Version *int64          `json:"version,omitempty"`
}

// Side is what one side of a canary reported: the canary gateways of the
// new version, or the rest of the fleet of the stable version.
type Side struct {
	// Requests and Refused are the side's sums, saturating at the largest
	// int64.
	Requests int64 `json:"requests"`
	Refused  int64 `json:"refused"`
	// Gateways counts the distinct gateways that reported requests.
	Gateways int `json:"gateways"`
	// Rate is the fraction refused, each gateway's own rate weighed by its
	// requests up to the service's canary sample.
	Rate float64 `json:"rate"`
}

// Rollout is one version's rollout as the admin API shows it.
type Rollout struct {
	Version int64 `json:"version"`
	// State is canary, promoted, halted or superseded.
	State     string     `json:"state"`
	Emergency bool       `json:"emergency,omitempty"`
	Canaries  []string   `json:"canaries"`
	StartedAt time.Time  `json:"started_at"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	// Reason says why it was promoted, halted or superseded.
	Reason string `json:"reason,omitempty"`
	// Compared says, for a canary decided at the end of its window or by
	// its counts, whether both sides had enough requests to compare their
	// refusal rates: false means it was promoted unchecked. Nil for
	// rollouts without a canary and those decided by hand.
	Compared *bool `json:"compared,omitempty"`
	// Canary and Rest are the decisions reported since the canary started,
	// for the running canary only.
	Canary *Side `json:"canary_counts,omitempty"`
	Rest   *Side `json:"rest_counts,omitempty"`
}

// RolloutStatus is the answer of GET /admin/v1/rollout.
type RolloutStatus struct {
	// Stable is the version every gateway outside the canary runs.
	Stable int64 `json:"stable_version"`
	// Rollouts are the newest twenty, newest first.
	Rollouts []Rollout `json:"rollouts"`
}

// Decision is the answer of POST /admin/v1/rollout/promote and /halt: the
// canary version decided and its new state, promoted or halted.
type Decision struct {
	Version int64  `json:"version"`
	State   string `json:"state"`
}

// Gateway is one gateway that polled within the service's gateway TTL.
type Gateway struct {
	ID      string `json:"id"`
	Region  string `json:"region"`
	Version int64  `json:"version"`
	// Token names the gateway token it polls with; empty on a trusted
	// network.
	Token      string     `json:"token,omitempty"`
	LastSeen   time.Time  `json:"last_seen"`
	LastReport *time.Time `json:"last_report,omitempty"`
	// Counted is true when the gateway also reported within the TTL: only
	// those count in the fleet and may be canaries.
	Counted bool `json:"counted"`
}

// Fleet is the answer of GET /admin/v1/fleet.
type Fleet struct {
	// Counts are the gateways that count in the fleet.
	Counts FleetCounts `json:"fleet"`
	// Gateways are those that polled within the gateway TTL, counted or
	// not, by region and ID.
	Gateways []Gateway `json:"gateways"`
}

// FleetCounts counts the gateways that count in the fleet, in all and by
// region.
type FleetCounts struct {
	Total   int            `json:"total"`
	Regions map[string]int `json:"regions,omitempty"`
}

// KeyCount is one key's count in a shadow report.
type KeyCount struct {
	// Key is the store key, hashed as internal/keyhash writes it unless
	// the service keeps raw keys.
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

// ShadowRule is what one shadow rule would have refused, summed over the
// gateways' reports.
type ShadowRule struct {
	Rule        int64      `json:"rule"`
	WouldRefuse int64      `json:"would_refuse"`
	TopKeys     []KeyCount `json:"top_keys"`
}

// The operations of a Change.
const (
	OpAdd    = "add"
	OpRemove = "remove"
	OpChange = "change"
)

// Change is one difference between the stored rule set and a document
// applied with PUT /admin/v1/ruleset.
type Change struct {
	// Op is OpAdd, OpRemove or OpChange.
	Op string `json:"op"`
	// Kind is "rule", "key" or "endpoint".
	Kind string `json:"kind"`
	// Name is the key, the endpoint's name, or for a rule its scope and
	// match, such as "plan plan=free".
	Name string `json:"name"`
	// Rule is the stored rule's ID: for a rule removed or changed, and for
	// one added once the change is made (not in a dry run).
	Rule int64 `json:"rule,omitempty"`
	// Before and After are the entry before and after, as JSON; Before is
	// absent for an addition and After for a removal.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Applied is the answer of PUT /admin/v1/ruleset.
type Applied struct {
	// Changes are the differences, rules first (by ID, additions last),
	// then keys and endpoints by name. Empty when the document matches
	// what is stored: then no version is made.
	Changes []Change `json:"changes"`
	// Hash is the rule set's snapshot hash with the document applied. A
	// dry run's differs from the real one's when rules are added: their
	// IDs, part of the rule set, are only given when they are stored.
	Hash string `json:"hash"`
	// DryRun is true when nothing was stored.
	DryRun bool `json:"dry_run,omitempty"`
	// Snapshot is the one version that holds every change; nil in a dry run
	// and when nothing changed.
	Snapshot *Published `json:"snapshot,omitempty"`
}
