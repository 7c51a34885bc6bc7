package admin

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// ExplainPath is the admin endpoint that explains a key's limits, below
// Prefix; a gateway serves the same answer at this path on its metrics
// address.
const ExplainPath = "/explain"

// Explanation answers "why was I limited?" for one API key and one
// request: GET /admin/v1/explain?key=KEY&method=GET&path=/v1/search.
type Explanation struct {
	// Key is the API key asked about, and KeyHash the name the decision
	// log and the busiest-keys summaries give it (internal/keyhash).
	Key     string `json:"key"`
	KeyHash string `json:"key_hash"`
	// Known reports whether the key directory lists the key; Plan and Org
	// are what it says.
	Known bool   `json:"known"`
	Plan  string `json:"plan,omitempty"`
	Org   string `json:"org,omitempty"`
	// Method, Path and Endpoint are the request asked about and the
	// endpoint it matched (empty when none); Cost is what it takes.
	Method   string `json:"method"`
	Path     string `json:"path"`
	Endpoint string `json:"endpoint,omitempty"`
	Cost     int64  `json:"cost"`
	// RulesVersion is the snapshot explained (zero for a rules file), and
	// At the time its rules were resolved at.
	RulesVersion int64     `json:"rules_version"`
	At           time.Time `json:"at"`
	// Limits are every limit of every rule that matches, in force or
	// displaced by a more specific rule, least specific scope first.
	Limits []ExplainedLimit `json:"limits"`
	// Tightest names the enforced limit in force with the lowest
	// sustained rate, after any region share: the one a steady client
	// meets first. Empty when none is enforced.
	Tightest string `json:"tightest,omitempty"`
	// LastRefusal is the most recent refusal of this key the gateways
	// reported, when the answering service has seen one.
	LastRefusal *Refusal `json:"last_refusal,omitempty"`
	// Refused are the busiest refused keys of the rules listed, newest
	// version first, when the answering service has seen them refuse
	// (hashed keys; see RefusedRule): who else this rule is refusing now.
	Refused []RefusedRule `json:"refused,omitempty"`
	// StateError says why the limits carry no State, when a store was
	// asked and failed.
	StateError string `json:"state_error,omitempty"`
}

// ExplainedLimit is one limit of one matching rule.
type ExplainedLimit struct {
	// Name, Count, Per, Burst and Algorithm are the limit as the rule
	// writes it, Burst filled in when the rule leaves it to the default.
	Name      string          `json:"name"`
	Count     int64           `json:"count"`
	Per       rules.Duration  `json:"per"`
	Burst     int64           `json:"burst"`
	Algorithm limit.Algorithm `json:"algorithm"`
	// Shadow is true for a shadow rule's limit: checked, never refusing.
	Shadow bool `json:"shadow,omitempty"`
	// InForce is true for the limit a request is checked against for its
	// name; false for one a more specific rule displaced, or Expired.
	InForce bool `json:"in_force"`
	Expired bool `json:"expired,omitempty"`
	// Tightest marks the limit Explanation.Tightest names.
	Tightest bool `json:"tightest,omitempty"`
	// Rule is where the limit comes from.
	Rule RuleRef `json:"rule"`
	// Share is this region's part of the limit, when the answerer knows
	// the region shares.
	Share *RegionShare `json:"share,omitempty"`
	// State is the key's bucket now, for an enforced limit in force, when
	// the answerer reads the store.
	State *LimitState `json:"state,omitempty"`
}

// RuleRef names a rule: its scope, match and where it comes from.
type RuleRef struct {
	// ID is the rules service's rule ID; zero in a rules file.
	ID int64 `json:"id,omitempty"`
	// Version is the snapshot that last changed the rule, when the
	// rules service answers; RulesVersion of the explanation otherwise.
	Version int64       `json:"version,omitempty"`
	Scope   rules.Scope `json:"scope"`
	Match   rules.Match `json:"match,omitzero"`
	// Source is where the rule is kept: "rules service", or the rules
	// file's path.
	Source string `json:"source"`
	// Override is true for an emergency override of one key: a key rule
	// with an expiry; Reason and ExpiresAt say why and until when.
	Override  bool      `json:"override,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// RegionShare is this region's part of a global limit, as the balancer
// last set it, and the limit the region enforces for it.
type RegionShare struct {
	Fraction float64        `json:"fraction"`
	Count    int64          `json:"count"`
	Per      rules.Duration `json:"per"`
	Burst    int64          `json:"burst"`
}

// LimitState is a key's bucket of one limit, read without taking from it.
type LimitState struct {
	// Remaining is the tokens (or, for window algorithms, requests) the
	// key may still spend now.
	Remaining int64 `json:"remaining"`
	// FullInMillis is how long until the bucket is full again, or for a
	// window algorithm until the current window ends.
	FullInMillis int64 `json:"full_in_ms"`
	// Source is the store that answered (limit.Source).
	Source limit.Source `json:"source,omitempty"`
}

// Refusal is one refusal a gateway reported.
type Refusal struct {
	// Rule and RulesVersion name the rule that refused and the snapshot
	// it was in; Limit the limit's name.
	Rule         int64  `json:"rule"`
	RulesVersion int64  `json:"rules_version"`
	Limit        string `json:"limit,omitempty"`
	// At is when the report that carried it arrived.
	At time.Time `json:"at"`
}

// Explain asks the rules service why key is limited on a request of
// method to path: the rules that apply, the tightest, the key's state
// in the store when the service reads one, and the last refusal the
// gateways reported.
func (c *Client) Explain(ctx context.Context, key, method, path string) (Explanation, error) {
	return c.ExplainRegion(ctx, key, method, path, "")
}

// ExplainRegion is Explain with region's shares of the limits, which the
// rules service reads from the quota balancer it is given; an empty region
// is Explain.
func (c *Client) ExplainRegion(ctx context.Context, key, method, path, region string) (Explanation, error) {
	q := url.Values{"key": {key}, "method": {method}, "path": {path}}
	if region != "" {
		q.Set("region", region)
	}
	return call[Explanation](ctx, c, "GET", ExplainPath+"?"+q.Encode(), nil)
}

// ExplainInput is what Build explains.
type ExplainInput struct {
	// Set is the rule set in force. Required.
	Set *rules.Set
	// Now is the time rules are resolved at.
	Now time.Time
	// Key, Method and Path are the request asked about. Key is an API key,
	// not a store key.
	Key, Method, Path string
	// Source is where Set's rules are kept, for RuleRef.Source; empty
	// means "rules service".
	Source string
	// Versions gives each rule ID's version (the snapshot that last
	// changed it); nil leaves RuleRef.Version at the set's version.
	Versions map[int64]int64
	// Store, if set, is read for each limit in force: a take of more
	// tokens than the limit ever holds, which every store refuses without
	// changing anything. Give the shared store itself (a Redis store, a
	// memstore), never a lease layer, whose refusal cache would remember
	// the answer.
	Store limit.Store
	// Share, if set, gives this region's share of a limit for the store
	// key, as a fraction; false when the limit is enforced whole.
	Share func(storeKey, limitName string) (limit.Fraction, bool)
}

// Build explains in.Key's limits from in.Set, reading the store and the
// shares when given. A request path that is another spelling of an
// endpoint's is an error, as the gateway refuses it.
func Build(ctx context.Context, in ExplainInput) (Explanation, error) {
	if err := rules.CheckKey(in.Key); err != nil {
		return Explanation{}, fmt.Errorf("key: %w", err)
	}
	storeKey := "k:" + in.Key
	e := Explanation{Key: in.Key, KeyHash: keyhash.Of(storeKey), Method: in.Method, Path: in.Path,
		RulesVersion: in.Set.Version, At: in.Now.UTC()}
	info, known := in.Set.Key(in.Key)
	e.Known, e.Plan, e.Org = known, info.Plan, info.Org
	ep, _, err := in.Set.MatchEndpoint(in.Method, in.Path)
	if err != nil {
		return Explanation{}, err
	}
	e.Endpoint = ep.Name
	q := rules.Query{APIKey: in.Key, Endpoint: ep.Name, LookedUp: true, Info: info, Known: known}
	res := in.Set.Resolve(in.Now, q)
	e.Cost = res.Cost
	// Under org rules a key's buckets live under its org's store key, its
	// own limits and the org's renamed apart (rules.Resolution.StoreKey).
	peekKey, storeLimits := res.StoreKey(storeKey), res.AppendStoreLimits(nil, in.Key)
	storeName := func(l limit.Limit, org bool) string {
		for i, rl := range res.Limits {
			if rl.Name == l.Name && (i >= len(res.Limits)-res.OrgLimits) == org {
				return storeLimits[i].Name
			}
		}
		return l.Name
	}
	source := cmp.Or(in.Source, "rules service")
	tightest, best := -1, math.Inf(1)
	for _, c := range in.Set.Candidates(in.Now, q) {
		l := c.Limit
		el := ExplainedLimit{Name: l.Name, Count: l.Count, Per: rules.Duration(l.Period), Burst: l.EffectiveBurst(),
			Algorithm: l.Alg(), Shadow: l.Shadow, InForce: c.InForce, Expired: c.Expired, Rule: ruleRef(c.Rule, source, in)}
		if in.Share != nil && c.InForce {
			if f, ok := in.Share(storeKey, l.Name); ok {
				if s, ok := l.Scale(f, limit.RoundDown); ok {
					el.Share = &RegionShare{Fraction: float64(f.Num) / float64(f.Den), Count: s.Count,
						Per: rules.Duration(s.Period), Burst: s.EffectiveBurst()}
					l = s
				}
			}
		}
		if in.Store != nil && c.InForce && !l.Shadow && e.StateError == "" {
			sl := l
			sl.Name = storeName(l, c.Rule.Scope == rules.ScopeOrg)
			st, err := peek(ctx, in.Store, peekKey, sl)
			if err != nil {
				e.StateError = err.Error()
			} else {
				el.State = st
			}
		}
		if c.InForce && !l.Shadow {
			if r := float64(l.Count) / l.Period.Seconds(); r < best {
				tightest, best = len(e.Limits), r
			}
		}
		e.Limits = append(e.Limits, el)
	}
	if tightest >= 0 {
		e.Limits[tightest].Tightest = true
		e.Tightest = e.Limits[tightest].Name
	}
	return e, nil
}

func ruleRef(r *rules.Rule, source string, in ExplainInput) RuleRef {
	ref := RuleRef{ID: r.ID, Version: in.Set.Version, Scope: r.Scope, Match: r.Match, Source: source,
		Override: r.Scope == rules.ScopeKey && !r.ExpiresAt.IsZero(), Reason: r.Reason, ExpiresAt: r.ExpiresAt}
	if v, ok := in.Versions[r.ID]; ok {
		ref.Version = v
	}
	return ref
}

// peek reads the key's bucket of l without changing it: a request of one
// token more than l ever holds is refused by every algorithm, and a
// refused request takes nothing (the limit.Store contract).
func peek(ctx context.Context, s limit.Store, key string, l limit.Limit) (*LimitState, error) {
	req := limit.Request{Key: key, Cost: l.EffectiveBurst() + 1, Limits: []limit.Limit{l}}
	d, err := s.Take(ctx, &req)
	if err != nil {
		return nil, fmt.Errorf("read the state of limit %q: %w", l.Name, err)
	}
	if d.Allowed {
		return nil, fmt.Errorf("read the state of limit %q: the store allowed %d tokens of a limit that holds %d", l.Name, req.Cost, req.Cost-1)
	}
	return &LimitState{Remaining: d.Remaining, FullInMillis: d.ResetAfter.Milliseconds(), Source: d.Source}, nil
}

// RefusedPath is the admin endpoint of the busiest refused keys, below
// Prefix.
const RefusedPath = "/refused"

// RefusedRule is one rule version's busiest refused keys, from the
// gateways' reports: GET /admin/v1/refused.
type RefusedRule struct {
	Rule         int64 `json:"rule"`
	RulesVersion int64 `json:"rules_version"`
	// Refused is every refusal of the rule version the service counted.
	Refused int64        `json:"refused"`
	Keys    []RefusedKey `json:"keys"`
}

// RefusedKey is one key of a busiest-keys summary. The summary is
// space-saving: a key in it was refused at most Count times and at least
// Count - Over; a key refused more than Refused / 64 times is always in it.
type RefusedKey struct {
	// Key is the store key as the decision log writes it (keyhash).
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Over  int64  `json:"over,omitempty"`
	// Limit is the limit that last refused it, at Last.
	Limit string    `json:"limit,omitempty"`
	Last  time.Time `json:"last"`
}

// Refused returns, for each rule version the service has seen refuse, its
// busiest refused keys, the newest versions first.
func (c *Client) Refused(ctx context.Context) ([]RefusedRule, error) {
	return ruleList[RefusedRule](ctx, c, RefusedPath)
}
