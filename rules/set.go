package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/quota"
)

// Set is a compiled, validated rule set: immutable and safe for concurrent
// use. The zero value is not usable; build one with Compile, Parse or
// LoadFile.
type Set struct {
	// Version orders snapshots from the rules service; zero for a file.
	Version int64
	// Hash is the hex SHA-256 of the set's canonical JSON, rules' versions
	// left out: two sets with the same rules have the same hash.
	Hash string
	doc  Document

	endpoints []Endpoint
	paths     []endpointPath // parallel to endpoints
	// compiled rules, indexed by what they match.
	byMatch map[matchKey][]compiled
	ip      []compiled
	hasOrg  bool // some rule has scope org
	// resolved caches Resolve's answers by resolveKey (*resolved values).
	// It holds at most one entry per plan and endpoint, per key with key
	// rules, and for requests without a key: bounded by the rules.
	resolved sync.Map
}

// resolveKey is what a Resolution depends on, besides the time.
type resolveKey struct {
	ip       bool   // a request without an API key
	plan     string // the key's plan; empty for unknown keys
	key      string // the API key, only when key-scope rules name it
	endpoint string
	org      string // the key's org, only when org rules match it
}

// resolved is a cached Resolution and the times it holds for: from when
// it was made (a rule expired then stays expired) until the next expiry of
// a rule among its candidates.
type resolved struct {
	res   Resolution
	from  time.Time
	until time.Time // zero: never
}

// matchKey is the index of a rule: its scope and match fields.
type matchKey struct {
	scope              Scope
	plan, ep, key, org string
}

type compiled struct {
	rule    *Rule
	limits  []limit.Limit
	quotas  []quota.Quota
	shadow  bool
	expires time.Time // zero: never
}

// specificity orders scopes for the merge: a higher one wins a limit name.
func specificity(sc Scope, m Match) int {
	switch sc {
	case ScopeKey:
		return 5
	case ScopePlan:
		if m.Endpoint != "" {
			return 4
		}
		return 3
	case ScopeEndpoint:
		return 2
	case ScopeOrg:
		// Org rules merge among themselves only; a named org beats every
		// org, and an endpoint narrows either.
		n := 1
		if m.Org != "" {
			n += 2
		}
		if m.Endpoint != "" {
			n++
		}
		return n
	}
	return 1 // default, ip
}

// Parse reads a rules file's YAML and compiles it. name is used in errors.
func Parse(name string, data []byte) (*Set, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("rules file %s: %w", name, &FieldError{Where: "the file", Problem: "is empty; it needs at least one rule"})
	}
	var doc Document
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("rules file %s: %w", name, err)
	}
	if len(doc.Rules) == 0 {
		return nil, fmt.Errorf("rules file %s: %w", name, &FieldError{Where: "the file", Field: "rules", Problem: "none given; a file needs at least one rule"})
	}
	s, err := Compile(doc, 0)
	if err != nil {
		return nil, fmt.Errorf("rules file %s: %w", name, err)
	}
	return s, nil
}

// LoadFile reads and compiles the rules file at path.
func LoadFile(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	return Parse(path, data)
}

// Document returns the rules as written. The caller must not modify it.
func (s *Set) Document() Document { return s.doc }

// Compile validates doc and builds a Set of the given version. The error
// names the rule and the field at fault.
func Compile(doc Document, version int64) (*Set, error) {
	s := &Set{Version: version, doc: doc, byMatch: map[matchKey][]compiled{}}
	for k, info := range doc.Keys {
		if err := CheckKey(k); err != nil {
			return nil, &FieldError{Where: fmt.Sprintf("keys[%q]", k), Problem: err.Error()}
		}
		if info.Plan == "" {
			return nil, &FieldError{Where: fmt.Sprintf("keys[%q]", k), Field: "plan", Problem: "is empty"}
		}
		if info.Org != "" {
			if err := checkOrg(info.Org); err != nil {
				return nil, &FieldError{Where: fmt.Sprintf("keys[%q]", k), Field: "org", Problem: err.Error()}
			}
		}
	}
	names := map[string]bool{}
	for i, ep := range doc.Endpoints {
		where := fmt.Sprintf("endpoints[%d] (%s)", i, ep.Name)
		switch {
		case ep.Name == "":
			return nil, &FieldError{Where: where, Field: "name", Problem: "is empty"}
		case names[ep.Name]:
			return nil, &FieldError{Where: where, Field: "name", Problem: "is used by an earlier endpoint"}
		case checkEndpointPath(ep.Path) != nil:
			return nil, &FieldError{Where: where, Field: "path", Problem: checkEndpointPath(ep.Path).Error()}
		case ep.Cost < 0:
			return nil, &FieldError{Where: where, Field: "cost", Problem: fmt.Sprintf("%d is negative", ep.Cost)}
		case ep.Method != "" && ep.Method != strings.ToUpper(ep.Method):
			return nil, &FieldError{Where: where, Field: "method", Problem: fmt.Sprintf("%q must be upper case", ep.Method)}
		case checkCostHeader(ep.CostHeader) != nil:
			return nil, &FieldError{Where: where, Field: "cost_header", Problem: checkCostHeader(ep.CostHeader).Error()}
		}
		names[ep.Name] = true
		s.endpoints = append(s.endpoints, ep)
	}
	// Exact paths before prefixes, longer prefixes before shorter ones, and
	// for one path an endpoint of one method before one of any method.
	sort.SliceStable(s.endpoints, func(i, j int) bool {
		a, b := &s.endpoints[i], &s.endpoints[j]
		pa, pb := strings.HasSuffix(a.Path, "*"), strings.HasSuffix(b.Path, "*")
		if pa != pb {
			return !pa
		}
		if len(a.Path) != len(b.Path) {
			return len(a.Path) > len(b.Path)
		}
		return a.Method != "" && b.Method == ""
	})
	for i := range s.endpoints {
		s.paths = append(s.paths, newEndpointPath(&s.endpoints[i]))
	}
	for i := range doc.Rules {
		r := &doc.Rules[i]
		c, err := compileRule(r, names)
		if err != nil {
			return nil, &FieldError{Where: fmt.Sprintf("rules[%d] (%s)", i, describe(r)), Field: err.Field, Problem: err.Problem}
		}
		mk := matchKey{scope: r.Scope, plan: r.Match.Plan, ep: r.Match.Endpoint, key: r.Match.Key, org: r.Match.Org}
		same := s.byMatch[mk]
		if r.Scope == ScopeIP {
			same = s.ip
		}
		for _, other := range same {
			if other.shadow == c.shadow && other.expires.IsZero() && c.expires.IsZero() {
				return nil, &FieldError{Where: fmt.Sprintf("rules[%d] (%s)", i, describe(r)), Field: "match",
					Problem: "another rule with the same scope, match and mode already exists"}
			}
		}
		s.hasOrg = s.hasOrg || r.Scope == ScopeOrg
		if r.Scope == ScopeIP {
			s.ip = append(s.ip, c)
		} else {
			s.byMatch[mk] = append(s.byMatch[mk], c)
		}
	}
	// The hash is of the rules, not of the snapshot that last changed each
	// (Rule.Version), so that a rule set validated before it is published
	// hashes as its snapshot will.
	hashed := doc
	if slices.ContainsFunc(doc.Rules, func(r Rule) bool { return r.Version != 0 }) {
		hashed.Rules = slices.Clone(doc.Rules)
		for i := range hashed.Rules {
			hashed.Rules[i].Version = 0
		}
	}
	canon, err := json.Marshal(hashed)
	if err != nil {
		return nil, fmt.Errorf("rules: encode for hashing: %w", err)
	}
	sum := sha256.Sum256(canon)
	s.Hash = hex.EncodeToString(sum[:])
	return s, nil
}

func describe(r *Rule) string {
	parts := []string{string(r.Scope)}
	for _, kv := range [][2]string{{"plan", r.Match.Plan}, {"endpoint", r.Match.Endpoint}, {"key", r.Match.Key}, {"org", r.Match.Org}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// CheckKey reports whether k can be an API key: not empty, at most
// MaxKeyLen bytes, and without control characters (bytes below 0x20 and
// 0x7f). It is the rule a gateway applies to the keys requests carry, so
// the key directory and overrides hold only keys a request can send.
func CheckKey(k string) error {
	if k == "" {
		return fmt.Errorf("API key is empty")
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("API key is %d bytes, longer than %d", len(k), MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("API key %q holds control character 0x%02x at byte %d", k, c, i)
		}
	}
	return nil
}

// MaxKeyLen is the longest API key sluice accepts, in bytes.
const MaxKeyLen = 256

func compileRule(r *Rule, endpoints map[string]bool) (compiled, *FieldError) {
	fe := func(field, format string, a ...any) (compiled, *FieldError) {
		return compiled{}, &FieldError{Field: field, Problem: fmt.Sprintf(format, a...)}
	}
	m := r.Match
	switch r.Scope {
	case ScopeOrg:
		if m.Plan != "" || m.Key != "" {
			return fe("match", "an org rule matches {org: NAME}, or every organization with no org, and optionally an endpoint")
		}
		if m.Org != "" {
			if err := checkOrg(m.Org); err != nil {
				return fe("match.org", "%v", err)
			}
		}
	case ScopeDefault, ScopeIP:
		if m != (Match{}) {
			return fe("match", "a %s rule matches everything and takes no match", r.Scope)
		}
	case ScopeEndpoint:
		if m.Endpoint == "" || m.Plan != "" || m.Key != "" || m.Org != "" {
			return fe("match", "an endpoint rule matches exactly one endpoint: {endpoint: NAME}")
		}
	case ScopePlan:
		if m.Plan == "" || m.Key != "" || m.Org != "" {
			return fe("match", "a plan rule matches {plan: NAME} and optionally an endpoint")
		}
	case ScopeKey:
		if m.Key == "" || m.Plan != "" || m.Endpoint != "" || m.Org != "" {
			return fe("match", "a key rule matches exactly one key: {key: KEY}")
		}
		if err := CheckKey(m.Key); err != nil {
			return fe("match.key", "%v", err)
		}
	case "":
		return fe("scope", "is missing (want default, ip, endpoint, plan, key or org)")
	default:
		return fe("scope", "%q is not one of default, ip, endpoint, plan, key, org", r.Scope)
	}
	if m.Endpoint != "" && !endpoints[m.Endpoint] {
		return fe("match.endpoint", "%q is not a declared endpoint", m.Endpoint)
	}
	switch r.Mode {
	case "", Enforce, Shadow:
	default:
		return fe("mode", "%q is not enforce or shadow", r.Mode)
	}
	switch r.FailMode {
	case "", FailOpen, FailClosed:
	default:
		return fe("fail_mode", "%q is not open or closed", r.FailMode)
	}
	if err := r.Refusals.check(); err != nil {
		return fe("refusals", "%v", err)
	}
	if len(r.Limits) == 0 && len(r.Quotas) == 0 && r.Concurrency == 0 {
		return fe("limits", "a rule needs at least one limit, a quota or a concurrency")
	}
	if r.Concurrency < 0 {
		return fe("concurrency", "%d is negative", r.Concurrency)
	}
	c := compiled{rule: r, shadow: r.Mode == Shadow, expires: r.ExpiresAt}
	if err := compileQuotas(r, &c); err != nil {
		return compiled{}, err
	}
	for j := range r.Limits {
		l, err := r.Limits[j].toLimit(r.FailMode == FailClosed)
		if err != nil {
			return fe(fmt.Sprintf("limits[%d]", j), "%v", err)
		}
		// The store charges a refusal of this rule's limits in the call
		// that refused it (limit.Limit.CountRefusals).
		l.CountRefusals = r.CountsRefusals()
		for _, prev := range c.limits {
			if prev.Name == l.Name {
				return fe(fmt.Sprintf("limits[%d].name", j), "%q is used twice in this rule", l.Name)
			}
		}
		// A shadow rule's limits say so themselves, so that a store checks
		// them in the same call as the enforced ones, apart and never
		// refusing (limit.Limit.Shadow).
		l.Shadow = c.shadow
		c.limits = append(c.limits, l)
	}
	return c, nil
}

// Query is what the gateway knows of a request when it resolves its limits.
type Query struct {
	// APIKey is the caller's API key; empty for a request without one.
	APIKey string
	// Endpoint is the endpoint's name from Endpoint; empty when none matched.
	Endpoint string
	// LookedUp says that Info and Known hold what Key returned for
	// APIKey, so that Resolve does not look the key up again.
	LookedUp bool
	// Info is APIKey's directory entry, and Known whether it has one;
	// read only when LookedUp.
	Info  KeyInfo
	Known bool
}

// Resolution is the limits that apply to one request.
type Resolution struct {
	// Limits are enforced: all must allow the request.
	Limits []limit.Limit
	// Shadow limits are checked and logged, never enforced; each has
	// limit.Limit.Shadow set.
	Shadow []limit.Limit
	// Cost is the request's cost in tokens.
	Cost int64
	// Plan is the key's plan; empty for unknown keys and requests without one.
	Plan string
	// Rules are the rules that contributed a limit, parallel to Limits.
	Rules []*Rule
	// ShadowRules are parallel to Shadow.
	ShadowRules []*Rule
	// Org is the key's organization when org rules apply to it (the last
	// OrgLimits of Limits and OrgShadow of Shadow are the org's); empty
	// otherwise. Such a request is taken under the org's store key
	// (StoreKey) with its limits renamed per key (AppendStoreLimits).
	Org string
	// OrgLimits and OrgShadow count the org's limits at the end of Limits
	// and Shadow.
	OrgLimits, OrgShadow int
	// Quotas are the key's daily and monthly quotas (package quota),
	// merged by name as limits are; QuotaRules are parallel to them. An
	// org rule's quotas follow the key's and count under the org's store
	// key (quota.Quota.Key); a shadow rule's quotas (quota.Quota.Shadow)
	// come last, counted apart and never refusing.
	Quotas     []quota.Quota
	QuotaRules []*Rule
	// Concurrency are the caller's concurrency limits (package inflight),
	// at most one of each kind, in this order: the key's (or the client
	// address's), its org's, then the shadow ones of each. Empty means
	// none.
	Concurrency []ConcurrencyLimit
	// CostHeader is the endpoint's Endpoint.CostHeader: the response
	// header or trailer holding the true cost, Cost being the estimate.
	CostHeader string
}

// ConcurrencyLimit is one concurrency limit of a request, as resolved: at
// most Most requests in flight at once, set by Rule.
type ConcurrencyLimit struct {
	Most int64
	Rule *Rule
	// Key is the store key the slots are held under: the org's ("o:" and
	// its name) for an org rule's limit, counting every key of the org;
	// empty for the caller's own.
	Key string
	// Shadow marks a shadow rule's limit: its slots are held apart, and a
	// request it would refuse passes and is reported.
	Shadow bool
}

// Key returns what the directory knows of an API key.
func (s *Set) Key(apiKey string) (KeyInfo, bool) {
	k, ok := s.doc.Keys[apiKey]
	return k, ok
}

// Resolve returns the limits of a request at time now. For each limit name
// the most specific rule wins: a key's own override, then plan and endpoint,
// then plan, then endpoint, then the default (for requests without an API
// key, the ip rules stand in for the default). Expired rules do not apply.
//
// Answers are cached per plan, endpoint and (for keys with key rules) key
// until the next rule expiry, so a request costs two map lookups. The
// Resolution's slices are shared with every other request: read them,
// never write to them.
func (s *Set) Resolve(now time.Time, q Query) Resolution {
	k := s.keyOf(q)
	if v, ok := s.resolved.Load(k); ok {
		if r := v.(*resolved); !now.Before(r.from) && (r.until.IsZero() || now.Before(r.until)) {
			return r.res
		}
	}
	r := s.resolve(now, k)
	s.resolved.Store(k, r)
	return r.res
}

// resolve computes the Resolution for k at now.
func (s *Set) resolve(now time.Time, k resolveKey) *resolved {
	var res Resolution
	res.Org = k.org
	if !k.ip {
		res.Plan = k.plan
	}
	cands, n := s.matching(k)
	// Limits merge in four groups, as quotas and concurrency limits do:
	// the key's, the org's, and the shadow ones of each (kindOf).
	var limits [4][]pick[limit.Limit]
	var quotas [4][]pick[quota.Quota]
	var conc [4]ConcurrencyLimit
	concSpec := [4]int{-1, -1, -1, -1}
	var until time.Time
	for _, cs := range cands[:n] {
		for i := range cs {
			c := &cs[i]
			if !c.expires.IsZero() && !now.Before(c.expires) {
				continue
			}
			if !c.expires.IsZero() && (until.IsZero() || c.expires.Before(until)) {
				until = c.expires
			}
			kind, spec := kindOf(c), rank(c)
			mergeByName(&limits[kind], c.limits, c.rule, spec, func(l limit.Limit) string { return l.Name })
			mergeByName(&quotas[kind], c.quotas, c.rule, spec, func(q quota.Quota) string { return q.Name })
			if cc := c.rule.Concurrency; cc > 0 && spec > concSpec[kind] {
				concSpec[kind], conc[kind] = spec, ConcurrencyLimit{Most: cc, Rule: c.rule, Shadow: c.shadow}
				if c.rule.Scope == ScopeOrg {
					conc[kind].Key = OrgKeyPrefix + k.org
				}
			}
		}
	}
	// The org's limits follow the key's: a store checks both in one call.
	for _, p := range append(limits[0], limits[1]...) {
		res.Limits = append(res.Limits, p.v)
		res.Rules = append(res.Rules, p.r)
	}
	for _, p := range append(limits[2], limits[3]...) {
		res.Shadow = append(res.Shadow, p.v)
		res.ShadowRules = append(res.ShadowRules, p.r)
	}
	for kind := range quotas {
		for _, p := range quotas[kind] {
			if p.r.Scope == ScopeOrg {
				p.v.Key = OrgKeyPrefix + k.org
			}
			res.Quotas = append(res.Quotas, p.v)
			res.QuotaRules = append(res.QuotaRules, p.r)
		}
		if conc[kind].Most > 0 {
			res.Concurrency = append(res.Concurrency, conc[kind])
		}
	}
	res.OrgLimits, res.OrgShadow = len(limits[1]), len(limits[3])
	if res.OrgLimits+res.OrgShadow == 0 {
		res.Org = ""
	}
	res.Cost = 1
	for _, ep := range s.endpoints {
		if k.endpoint != "" && ep.Name == k.endpoint {
			res.Cost = max(int64(ep.Cost), 1)
			res.CostHeader = ep.CostHeader
		}
	}
	return &resolved{res: res, from: now, until: until}
}

// kindOf is the merge group of c's limits, quotas and concurrency limit, in
// the order a Resolution lists them: the key's, the org's, the key's
// shadow, the org's shadow.
func kindOf(c *compiled) int {
	kind := 0
	if c.rule.Scope == ScopeOrg {
		kind = 1
	}
	if c.shadow {
		kind += 2
	}
	return kind
}

// rank orders c's rule in the merge: the more specific scope wins, and
// within one scope a rule with an expiry, a temporary override of the
// permanent one, wins the tie.
func rank(c *compiled) int {
	spec := 2 * specificity(c.rule.Scope, c.rule.Match)
	if !c.expires.IsZero() {
		spec++
	}
	return spec
}

// pick is a merged limit or quota and the rule it came from.
type pick[T any] struct {
	v    T
	r    *Rule
	spec int
}

// mergeByName adds vs, of rule r ranked spec, to into: one of a name
// already there is replaced if spec ranks higher, others are appended.
func mergeByName[T any](into *[]pick[T], vs []T, r *Rule, spec int, name func(T) string) {
next:
	for _, v := range vs {
		for i := range *into {
			if name((*into)[i].v) == name(v) {
				if spec > (*into)[i].spec {
					(*into)[i] = pick[T]{v, r, spec}
				}
				continue next
			}
		}
		*into = append(*into, pick[T]{v, r, spec})
	}
}

// keyOf returns what the Resolution of q depends on.
func (s *Set) keyOf(q Query) resolveKey {
	k := resolveKey{ip: q.APIKey == "", endpoint: q.Endpoint}
	if !k.ip {
		info, known := q.Info, q.Known
		if !q.LookedUp {
			info, known = s.doc.Keys[q.APIKey]
		}
		if known {
			k.plan = info.Plan
		}
		if _, ok := s.byMatch[matchKey{scope: ScopeKey, key: q.APIKey}]; ok {
			k.key = q.APIKey
		}
		if known && info.Org != "" && s.hasOrg {
			k.org = info.Org
		}
	}
	return k
}

// matching returns the compiled rules that may apply to a request of k,
// least specific first, in up to ten groups; the first n are filled.
func (s *Set) matching(k resolveKey) (cands [10][]compiled, n int) {
	add := func(mk matchKey) {
		if cs := s.byMatch[mk]; len(cs) > 0 {
			cands[n] = cs
			n++
		}
	}
	if k.org != "" {
		add(matchKey{scope: ScopeOrg})
		add(matchKey{scope: ScopeOrg, org: k.org})
		if k.endpoint != "" {
			add(matchKey{scope: ScopeOrg, ep: k.endpoint})
			add(matchKey{scope: ScopeOrg, org: k.org, ep: k.endpoint})
		}
	}
	if k.ip {
		if len(s.ip) > 0 {
			cands[n] = s.ip
			n++
		} else {
			add(matchKey{scope: ScopeDefault})
		}
	} else {
		add(matchKey{scope: ScopeDefault})
		if k.plan != "" {
			add(matchKey{scope: ScopePlan, plan: k.plan})
			if k.endpoint != "" {
				add(matchKey{scope: ScopePlan, plan: k.plan, ep: k.endpoint})
			}
		}
		if k.key != "" {
			add(matchKey{scope: ScopeKey, key: k.key})
		}
	}
	if k.endpoint != "" {
		add(matchKey{scope: ScopeEndpoint, ep: k.endpoint})
	}
	return cands, n
}
