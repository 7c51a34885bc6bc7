package rulesvc

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/rules"
)

// CountReader reads a request key's quota counters from the store the
// gateways count in: redisstore.Store.ReadCounts.
type CountReader interface {
	ReadCounts(ctx context.Context, key string, counters []string) ([]int64, error)
}

// Usage is the answer of GET /admin/v1/usage/{key}: the current period's
// counts of the key's quotas under the stable rule set.
type Usage struct {
	Key    string       `json:"key"`
	Quotas []QuotaUsage `json:"quotas"`
}

// QuotaUsage is one quota's count in its current period. Used is what the
// gateways have added to the shared counter, up to one flush interval
// behind the requests they served; billed counts come from request logs.
type QuotaUsage struct {
	Name      string    `json:"name"`
	Per       string    `json:"per"`
	Zone      string    `json:"zone"`
	Period    string    `json:"period"`
	Count     int64     `json:"count"`
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
	// Org names the organization an org rule's quota counts, every key
	// of it together; empty for the key's own.
	Org string `json:"org,omitempty"`
	// Shadow marks a shadow rule's quota: counted apart, never refusing.
	Shadow bool `json:"shadow,omitempty"`
}

// usage answers GET /admin/v1/usage/{key}: the quotas that apply to the
// key on any endpoint, and their counters read from the store.
func (s *Service) usage(w http.ResponseWriter, r *http.Request, _ string) error {
	key := r.PathValue("key")
	if err := rules.CheckKey(key); err != nil {
		return badRequest("key", "%v", err)
	}
	if s.cfg.Counts == nil {
		return &apiError{status: http.StatusNotImplemented, msg: "usage needs the store the gateways count quotas in: start the service with Redis"}
	}
	st := s.state.Load()
	if st.stable == nil || len(st.stable.doc) == 0 {
		return notFound("no rule set is published yet")
	}
	set, err := s.explainSets.compiled(st.stable)
	if err != nil {
		return err
	}
	now := time.Now()
	eps := []string{""}
	for _, ep := range set.Document().Endpoints {
		eps = append(eps, ep.Name)
	}
	out := Usage{Key: key, Quotas: []QuotaUsage{}}
	// The key's own counters and its org's are under two store keys: one
	// read of each.
	names := map[string][]string{}
	var storeKeys []string
	seen := map[string]bool{}
	var counters []string // parallel to out.Quotas: store key and counter
	for _, ep := range eps {
		for _, q := range set.Resolve(now, rules.Query{APIKey: key, Endpoint: ep}).Quotas {
			id, _, end := q.Window(now)
			sk, name := cmp.Or(q.Key, "k:"+key), q.CounterName(id)
			if seen[sk+" "+name] {
				continue
			}
			seen[sk+" "+name] = true
			counters = append(counters, sk+" "+name)
			zone := "UTC"
			if q.Location != nil {
				zone = q.Location.String()
			}
			if names[sk] == nil {
				storeKeys = append(storeKeys, sk)
			}
			names[sk] = append(names[sk], name)
			out.Quotas = append(out.Quotas, QuotaUsage{Name: q.Name, Per: string(q.Period), Zone: zone, Period: id,
				Count: q.Count, ResetsAt: end.UTC(), Org: strings.TrimPrefix(q.Key, rules.OrgKeyPrefix), Shadow: q.Shadow})
		}
	}
	used := map[string]int64{}
	for _, sk := range storeKeys {
		got, err := s.cfg.Counts.ReadCounts(r.Context(), sk, names[sk])
		if err != nil {
			return &apiError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("read %s's quota counters: %v", key, err)}
		}
		for i, n := range got {
			used[sk+" "+names[sk][i]] = n
		}
	}
	for i := range out.Quotas {
		out.Quotas[i].Used = used[counters[i]]
		out.Quotas[i].Remaining = quota.Remaining(out.Quotas[i].Count, out.Quotas[i].Used)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// quotasJSON is the quotas column of rule: its quotas, never null.
func quotasJSON(rule rules.Rule) []byte {
	if len(rule.Quotas) == 0 {
		return []byte("[]")
	}
	b, err := json.Marshal(rule.Quotas)
	if err != nil { // a []rules.Quota always encodes
		return []byte("[]")
	}
	return b
}
