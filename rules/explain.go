package rules

import (
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Candidate is one limit of one rule that matches a request: the material
// of an answer to "why was I limited?". Resolve keeps, for each limit
// name, the limit of the most specific rule; Candidates lists the others
// too, so that an operator sees which rule an override or a plan rule
// displaced.
type Candidate struct {
	// Rule is the rule the limit belongs to; shared with the Set, read
	// only.
	Rule *Rule
	// Limit is the limit as the store checks it (Limit.Shadow set for a
	// shadow rule's).
	Limit limit.Limit
	// InForce reports whether Resolve picks this limit for its name: an
	// enforced one among Resolution.Limits, a shadow one among
	// Resolution.Shadow.
	InForce bool
	// Expired reports that the rule's expires_at has passed: it no longer
	// applies, and is listed so that an override that just ended shows.
	Expired bool
}

// Candidates returns every limit of every rule that matches q at now, the
// least specific scope first, and whether each is in force. It is for
// explaining a decision, not for the request path: it allocates and
// caches nothing. The Resolution it is consistent with is Resolve's at
// the same time.
func (s *Set) Candidates(now time.Time, q Query) []Candidate {
	k := s.keyOf(q)
	res := s.resolve(now, k).res
	cands, n := s.matching(k)
	var out []Candidate
	for _, cs := range cands[:n] {
		for i := range cs {
			c := &cs[i]
			expired := !c.expires.IsZero() && !now.Before(c.expires)
			for _, l := range c.limits {
				out = append(out, Candidate{Rule: c.rule, Limit: l, Expired: expired,
					InForce: !expired && picked(&res, c.rule, l)})
			}
		}
	}
	return out
}

// picked reports whether res holds limit l of rule r.
func picked(res *Resolution, r *Rule, l limit.Limit) bool {
	ls, rs := res.Limits, res.Rules
	if l.Shadow {
		ls, rs = res.Shadow, res.ShadowRules
	}
	for i := range ls {
		if rs[i] == r && ls[i].Name == l.Name {
			return true
		}
	}
	return false
}
