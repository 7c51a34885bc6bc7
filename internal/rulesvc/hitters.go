package rulesvc

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/rulesapi"
)

// The bounds of the busiest-refused-keys summaries, so that no flood of
// keys or rule versions grows a replica's memory.
const (
	// hitterSlots is how many keys one rule version's summary counts.
	// The space-saving summary then finds every key refused more than
	// a 1/hitterSlots part of the rule's refusals, with counts over by at
	// most that part.
	hitterSlots = 64
	// hitterRules is how many rule versions are summarised at once; the
	// oldest version's summary goes first.
	hitterRules = 256
)

// ruleVersion names one rule as one snapshot version holds it.
type ruleVersion struct{ rule, version int64 }

// hitter is one key's slot in a space-saving summary.
type hitter struct {
	key   string // as keyhash.Of writes it
	count int64  // an upper bound of its refusals
	over  int64  // how much of count may belong to keys it displaced
	limit string
	last  time.Time
}

// summary is a space-saving summary (Metwally, Agrawal and El Abbadi,
// 2005) of the keys one rule version refused: at most hitterSlots keys,
// a new key taking the slot of the least-counted one and its count.
type summary struct {
	total int64
	slots []hitter
}

func (s *summary) add(key, lim string, n int64, at time.Time) {
	s.total += n
	for i := range s.slots {
		if h := &s.slots[i]; h.key == key {
			h.count += n
			h.limit, h.last = lim, at
			return
		}
	}
	if len(s.slots) < hitterSlots {
		s.slots = append(s.slots, hitter{key: key, count: n, limit: lim, last: at})
		return
	}
	least := 0
	for i := range s.slots {
		if s.slots[i].count < s.slots[least].count {
			least = i
		}
	}
	m := s.slots[least].count
	s.slots[least] = hitter{key: key, count: m + n, over: m, limit: lim, last: at}
}

// refusals keeps, per rule version, the busiest refused keys the
// gateways reported. It is safe for concurrent use; a replica counts the
// reports it received, so each replica's answer covers its own share of
// the gateways' reports until they are summed (see docs/rules-service.md).
type refusals struct {
	mu    sync.Mutex
	rules map[ruleVersion]*summary // guarded by mu
}

func newRefusals() *refusals { return &refusals{rules: map[ruleVersion]*summary{}} }

// add counts n refusals of key by rule version rv's limit lim.
func (r *refusals) add(rv ruleVersion, key, lim string, n int64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.rules[rv]
	if s == nil {
		if len(r.rules) >= hitterRules {
			older := func(a, b ruleVersion) int {
				return cmp.Or(cmp.Compare(a.version, b.version), cmp.Compare(a.rule, b.rule))
			}
			oldest := slices.MinFunc(slices.Collect(maps.Keys(r.rules)), older)
			if older(rv, oldest) < 0 {
				return // older than everything kept
			}
			delete(r.rules, oldest)
		}
		s = &summary{}
		r.rules[rv] = s
	}
	s.add(key, lim, n, at)
}

// last returns the most recent refusal of key (hashed) any summary holds.
func (r *refusals) last(key string) *admin.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out *admin.Refusal
	for rv, s := range r.rules {
		for _, h := range s.slots {
			if h.key == key && (out == nil || h.last.After(out.At)) {
				out = &admin.Refusal{Rule: rv.rule, RulesVersion: rv.version, Limit: h.limit, At: h.last}
			}
		}
	}
	return out
}

// top returns each rule version's busiest refused keys, most first, at
// most n a rule, the newest versions first.
func (r *refusals) top(n int) []admin.RefusedRule {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]admin.RefusedRule, 0, len(r.rules))
	for rv, s := range r.rules {
		rr := admin.RefusedRule{Rule: rv.rule, RulesVersion: rv.version, Refused: s.total}
		hs := slices.Clone(s.slots)
		slices.SortFunc(hs, func(a, b hitter) int { return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.key, b.key)) })
		for _, h := range hs[:min(n, len(hs))] {
			rr.Keys = append(rr.Keys, admin.RefusedKey{Key: h.key, Count: h.count, Over: h.over, Limit: h.limit, Last: h.last})
		}
		out = append(out, rr)
	}
	slices.SortFunc(out, func(a, b admin.RefusedRule) int {
		return cmp.Or(cmp.Compare(b.RulesVersion, a.RulesVersion), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}

// refusalRow is one reported key's refusals by one rule version.
type refusalRow struct {
	rv    ruleVersion
	limit string
	key   string
	n     int64
}

// checkRefusals validates the refusals of a report checkReport passed and
// returns its keys' rows. Keys must be hashed (keyhash.Of): the service
// never receives an API key through this summary.
func checkRefusals(rep *rulesapi.Report) ([]refusalRow, error) {
	var rows []refusalRow
	n := 0
	for i, v := range rep.Versions {
		where := fmt.Sprintf("versions[%d].refusals", i)
		if n += len(v.Refusals); n > rulesapi.MaxReportRefusalRules {
			return nil, badRequest(where, "more than %d refusing rules in one report", rulesapi.MaxReportRefusalRules)
		}
		var sum int64
		seen := map[int64]bool{}
		for j, rr := range v.Refusals {
			where := fmt.Sprintf("%s[%d]", where, j)
			switch {
			case rr.Rule <= 0:
				return nil, badRequest(where+".rule", "%d is not a rule ID", rr.Rule)
			case seen[rr.Rule]:
				return nil, badRequest(where+".rule", "rule %d is reported twice", rr.Rule)
			case len(rr.TopKeys) > rulesapi.MaxReportTopKeys:
				return nil, badRequest(where+".top_keys", "%d keys, more than %d", len(rr.TopKeys), rulesapi.MaxReportTopKeys)
			case len(rr.Limit) > 256:
				return nil, badRequest(where+".limit", "is %d bytes, longer than 256", len(rr.Limit))
			case rr.Refused < 0 || rr.Refused > v.Refused-sum:
				return nil, badRequest(where+".refused", "%d: the rules' refusals add up to more than the version's %d", rr.Refused, v.Refused)
			}
			seen[rr.Rule] = true
			sum += rr.Refused
			rest := rr.Refused
			for k, kc := range rr.TopKeys {
				where := fmt.Sprintf("%s.top_keys[%d]", where, k)
				if !hashedKey.MatchString(kc.Key) {
					return nil, badRequest(where+".key", "%q is not a hashed key (k: or ip: and 16 hex digits, as keyhash writes it)", kc.Key)
				}
				if kc.Count < 0 || kc.Count > rest {
					return nil, badRequest(where+".count", "%d: the top keys count more than refused, %d", kc.Count, rr.Refused)
				}
				rest -= kc.Count
				if kc.Count > 0 {
					rows = append(rows, refusalRow{rv: ruleVersion{rr.Rule, v.Version}, limit: rr.Limit, key: kc.Key, n: kc.Count})
				}
			}
		}
	}
	return rows, nil
}

// hashedKey is the form keyhash.Of writes.
var hashedKey = regexp.MustCompile(`^(k|ip):[0-9a-f]{16}$`)
