package gateway

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// ProblemRule names, in a refusal's problem document, the rule a limit
// comes from: enough for a client to quote and an operator to find it
// (sluice explain), nothing the client should not see. An override's
// reason is an operator's note and stays in the decision log; the key an
// override matches is the caller's own and is not repeated.
type ProblemRule struct {
	// Scope is the rule's scope: default, ip, endpoint, plan or key.
	Scope rules.Scope `json:"scope"`
	// Plan and Endpoint are what a plan or endpoint rule matches, and Org
	// the organization an org rule names (empty: every organization).
	Plan     string `json:"plan,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Org      string `json:"org,omitempty"`
	// Override is true for an emergency override of the caller's key,
	// which ends at ExpiresAt.
	Override  bool      `json:"override,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// ID is the rules service's rule ID; zero for a rules file.
	ID int64 `json:"id,omitempty"`
	// Version is the rule's own version: the snapshot that last changed
	// it (rules.Rule.Version); zero for a rules file.
	Version int64 `json:"version,omitempty"`
	// RulesVersion is the snapshot the request was checked against; zero
	// for a rules file.
	RulesVersion int64 `json:"rules_version,omitempty"`
}

// ProblemLimit is one enforced limit a refused request was checked
// against, in a refusal's problem document.
type ProblemLimit struct {
	// Name is the limit's name; Quota and Window its count and period in
	// seconds, as the RateLimit-Policy field writes them.
	Name   string `json:"name"`
	Quota  int64  `json:"quota"`
	Window int64  `json:"window"`
	// Refused is true for the limit that refused the request.
	Refused bool `json:"refused,omitempty"`
	// Remaining and RetryAfterMillis are this limit's own answer, when
	// the store gave one per limit (limit.Decision.Results): the tokens it
	// holds, and how long until it alone has room for the request (zero
	// when it had room).
	Remaining        *int64      `json:"remaining,omitempty"`
	RetryAfterMillis int64       `json:"retry_after_ms,omitempty"`
	Rule             ProblemRule `json:"rule"`
}

// problemRule describes rule r of snapshot version; the zero ProblemRule
// for a nil r.
func problemRule(r *rules.Rule, version int64) ProblemRule {
	if r == nil {
		return ProblemRule{}
	}
	return ProblemRule{Scope: r.Scope, Plan: r.Match.Plan, Endpoint: r.Match.Endpoint, Org: r.Match.Org,
		Override: isOverride(r), ExpiresAt: r.ExpiresAt, ID: r.ID, Version: r.Version, RulesVersion: version}
}

// isOverride reports whether r is an emergency override: a key rule with
// an expiry.
func isOverride(r *rules.Rule) bool { return r.Scope == rules.ScopeKey && !r.ExpiresAt.IsZero() }

// describeRule is the rule in the words of a problem's detail: "the
// override of your key (rule 7, version 11, of rules version 12)".
func describeRule(p ProblemRule) string {
	var b strings.Builder
	switch {
	case p.Override:
		b.WriteString("the emergency override of your key")
	case p.Scope == rules.ScopeKey:
		b.WriteString("the rule of your key")
	case p.Scope == rules.ScopePlan && p.Endpoint != "":
		fmt.Fprintf(&b, "plan %s's rule for endpoint %s", p.Plan, p.Endpoint)
	case p.Scope == rules.ScopePlan:
		fmt.Fprintf(&b, "plan %s's rule", p.Plan)
	case p.Scope == rules.ScopeOrg && p.Org != "":
		fmt.Fprintf(&b, "organization %s's rule", p.Org)
	case p.Scope == rules.ScopeEndpoint:
		fmt.Fprintf(&b, "endpoint %s's rule", p.Endpoint)
	default:
		fmt.Fprintf(&b, "the %s rule", p.Scope)
	}
	switch {
	case p.ID != 0 && p.Version != 0:
		fmt.Fprintf(&b, " (rule %d, version %d, of rules version %d)", p.ID, p.Version, p.RulesVersion)
	case p.ID != 0:
		fmt.Fprintf(&b, " (rule %d of rules version %d)", p.ID, p.RulesVersion)
	}
	return b.String()
}

// problemLimits lists the enforced limits ls of a request refused by d,
// from rules rs, with each one's own answer when d holds it.
func problemLimits(ls []limit.Limit, rs []*rules.Rule, d *limit.Decision, version int64) []ProblemLimit {
	out := make([]ProblemLimit, len(ls))
	for i := range ls {
		b := limit.BudgetOf(&ls[i], &limit.Decision{})
		out[i] = ProblemLimit{Name: ls[i].Name, Quota: b.Quota, Window: b.Window,
			Refused: i == d.Index, Rule: problemRule(ruleAt(rs, i), version)}
		if r, ok := d.Result(i); ok {
			rem := max(r.Remaining, 0)
			out[i].Remaining = &rem
			if r.RetryAfter > 0 {
				out[i].RetryAfterMillis = max(r.RetryAfter.Milliseconds(), 1)
			}
		}
	}
	return out
}

// nameRule adds to refusal e the rule of the limit of res that refused
// (d.Index), and every enforced limit of res.
func nameRule(e *Error, res *rules.Resolution, d *limit.Decision, version int64) {
	r := problemRule(ruleAt(res.Rules, d.Index), version)
	if r.Scope == "" {
		return
	}
	e.Problem.Rule = &r
	e.Problem.Limits = problemLimits(res.Limits, res.Rules, d, version)
	e.Problem.Detail += "; set by " + describeRule(r)
}

// limitNames lists the names of ls, for a log line.
func limitNames(ls []limit.Limit) []string {
	out := make([]string, len(ls))
	for i := range ls {
		out[i] = ls[i].Name
	}
	return out
}
