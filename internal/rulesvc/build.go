package rulesvc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/rules"
)

// querier is what reading the tables needs: a pool, a connection or a
// transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// built is a would-be snapshot: the document, compiled.
type built struct {
	doc       rules.Document
	set       *rules.Set
	overrides []int64 // IDs of the emergency overrides among doc.Rules
	// changed are the IDs of the rules the change being published made
	// or changed: insert gives them the new snapshot's version.
	changed []int64
}

// build reads the whole rule set and compiles it. Rules already expired are
// left out; the rest expire on the gateways at request time. A set that does
// not compile is returned as a *rules.FieldError.
func build(ctx context.Context, q querier) (*built, error) {
	var b built
	keys, err := readKeys(ctx, q)
	if err != nil {
		return nil, err
	}
	eps, err := readEndpoints(ctx, q)
	if err != nil {
		return nil, err
	}
	rs, overrides, err := readRules(ctx, q, "WHERE expires_at IS NULL OR expires_at > now()")
	if err != nil {
		return nil, err
	}
	b.doc = rules.Document{Keys: keys, Endpoints: eps, Rules: rs}
	for _, r := range rs {
		if overrides[r.ID] {
			b.overrides = append(b.overrides, r.ID)
		}
	}
	return &b, b.compile()
}

func (b *built) compile() (err error) {
	b.set, err = rules.Compile(b.doc, 0)
	return err
}

// withOverrides returns the emergency form of a change: the stable
// snapshot's document with its overrides replaced by cur's. It is what goes
// to every gateway at once while the rest of cur waits for its canary.
func withOverrides(stable rules.Document, stableOverrides []int64, cur *built) (*built, error) {
	out := built{doc: rules.Document{Keys: stable.Keys, Endpoints: stable.Endpoints}}
	for _, r := range stable.Rules {
		if !slices.Contains(stableOverrides, r.ID) {
			out.doc.Rules = append(out.doc.Rules, r)
		}
	}
	for _, r := range cur.doc.Rules {
		if slices.Contains(cur.overrides, r.ID) {
			out.doc.Rules = append(out.doc.Rules, r)
		}
	}
	slices.SortFunc(out.doc.Rules, func(a, b rules.Rule) int { return int(min(max(a.ID-b.ID, -1), 1)) })
	if out.doc.Rules == nil {
		out.doc.Rules = []rules.Rule{}
	}
	out.overrides = cur.overrides
	for _, id := range cur.changed {
		// Only an override is laid over the stable rules: another rule
		// changed is the stable one here, of its stable version.
		if slices.Contains(cur.overrides, id) {
			out.changed = append(out.changed, id)
		}
	}
	return &out, out.compile()
}

// insert stores b as the next snapshot version and returns the version.
// The rules b.changed names carry that version as their own
// (rules.Rule.Version): the snapshot is the one that changed them.
func (b *built) insert(ctx context.Context, tx pgx.Tx) (int64, error) {
	var v int64
	if err := tx.QueryRow(ctx, "SELECT nextval('snapshot_version')").Scan(&v); err != nil {
		return 0, fmt.Errorf("next snapshot version: %w", err)
	}
	if b.stamp(v, func(int64) bool { return true }) {
		// The set serves the document as stamped: compile again.
		if err := b.compile(); err != nil {
			return 0, fmt.Errorf("compile snapshot %d: %w", v, err)
		}
	}
	doc, err := json.Marshal(b.doc)
	if err != nil {
		return 0, fmt.Errorf("encode snapshot: %w", err)
	}
	overrides := b.overrides
	if overrides == nil {
		overrides = []int64{}
	}
	_, err = tx.Exec(ctx, "INSERT INTO snapshots (version, hash, document, override_ids) VALUES ($1, $2, $3, $4)",
		v, b.set.Hash, doc, overrides)
	if err != nil {
		return 0, fmt.Errorf("insert snapshot %d: %w", v, err)
	}
	return v, nil
}

// adopt gives the overrides b.changed names version v, that of the
// emergency snapshot that published them first, and leaves them out of
// b.changed: the canary snapshot published beside it carries them at the
// version the fleet runs and the database keeps, and stamps only what it
// alone changes.
func (b *built) adopt(v int64) error {
	isOverride := func(id int64) bool { return slices.Contains(b.overrides, id) }
	if !b.stamp(v, isOverride) {
		return nil
	}
	b.changed = slices.DeleteFunc(slices.Clone(b.changed), isOverride)
	return b.compile()
}

// stamp sets to v the Version of b's rules that b.changed names and only
// accepts, and reports whether it set any. The document's rules are copied
// first: b's may share them with another built (withOverrides).
func (b *built) stamp(v int64, only func(id int64) bool) bool {
	b.doc.Rules = slices.Clone(b.doc.Rules)
	stamped := false
	for i := range b.doc.Rules {
		if r := &b.doc.Rules[i]; slices.Contains(b.changed, r.ID) && only(r.ID) {
			r.Version, stamped = v, true
		}
	}
	return stamped
}

func readKeys(ctx context.Context, q querier) (map[string]rules.KeyInfo, error) {
	keys := map[string]rules.KeyInfo{}
	var k string
	var info rules.KeyInfo
	err := forEach(ctx, q, "keys", []any{&k, &info.Plan, &info.Org}, func() error {
		keys[k] = info
		return nil
	}, "SELECT key, plan, org FROM api_keys ORDER BY key")
	return keys, err
}

func readEndpoints(ctx context.Context, q querier) ([]rules.Endpoint, error) {
	return collect(ctx, q, "endpoints", func(r pgx.CollectableRow) (rules.Endpoint, error) {
		var ep rules.Endpoint
		var cost int64
		err := r.Scan(&ep.Name, &ep.Method, &ep.Path, &ep.CaseSensitive, &cost, &ep.CostHeader)
		ep.Cost = rules.Tokens(cost)
		return ep, err
	}, "SELECT name, method, path, case_sensitive, cost, cost_header FROM endpoints ORDER BY name")
}

// forEach runs a query and calls fn with each row scanned into dest; an
// error names what it read.
func forEach(ctx context.Context, q querier, what string, dest []any, fn func() error, sql string, args ...any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err == nil {
		_, err = pgx.ForEachRow(rows, dest, fn)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// collect runs a query and gathers its rows with fn; an error names what
// it read.
func collect[T any](ctx context.Context, q querier, what string, fn pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, fn)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return out, nil
}

const ruleColumns = "id, scope, match, limits, mode, fail_mode, expires_at, reason, override, quotas, concurrency, refusals, version"

// readRules reads the rules a WHERE clause selects, in ID order, and which
// of them are emergency overrides.
func readRules(ctx context.Context, q querier, where string, args ...any) ([]rules.Rule, map[int64]bool, error) {
	overrides := map[int64]bool{}
	rs, err := collect(ctx, q, "rules", func(row pgx.CollectableRow) (rules.Rule, error) {
		r, override, err := scanRule(row)
		if override {
			overrides[r.ID] = true
		}
		return r, err
	}, "SELECT "+ruleColumns+" FROM rules "+where+" ORDER BY id", args...)
	if err != nil {
		return nil, nil, err
	}
	if rs == nil {
		rs = []rules.Rule{}
	}
	return rs, overrides, nil
}

// scanRule scans the ruleColumns, then any extra columns into extra.
func scanRule(row pgx.Row, extra ...any) (rules.Rule, bool, error) {
	var (
		r              rules.Rule
		match, lims    []byte
		quotas         []byte
		expires        *time.Time
		mode, failMode string
		override       bool
		refusals       string
	)
	dest := append([]any{&r.ID, &r.Scope, &match, &lims, &mode, &failMode, &expires, &r.Reason, &override, &quotas, &r.Concurrency, &refusals, &r.Version}, extra...)
	if err := row.Scan(dest...); err != nil {
		return r, false, err
	}
	r.Mode, r.FailMode, r.Refusals = rules.Mode(mode), rules.FailMode(failMode), rules.Refusals(refusals)
	if expires != nil {
		r.ExpiresAt = expires.UTC()
	}
	if err := json.Unmarshal(match, &r.Match); err != nil {
		return r, false, fmt.Errorf("rule %d: match: %w", r.ID, err)
	}
	if err := json.Unmarshal(lims, &r.Limits); err != nil {
		return r, false, fmt.Errorf("rule %d: limits: %w", r.ID, err)
	}
	if err := json.Unmarshal(quotas, &r.Quotas); err != nil {
		return r, false, fmt.Errorf("rule %d: quotas: %w", r.ID, err)
	}
	if len(r.Quotas) == 0 {
		r.Quotas = nil
	}
	return r, override, nil
}
