package rulesvc

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
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
	set, err := st.stable.set()
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
	type counter struct{ storeKey, name string }
	var counters []counter         // parallel to out.Quotas
	names := map[string][]string{} // the counters of each store key
	for _, ep := range eps {
		for _, q := range set.Resolve(now, rules.Query{APIKey: key, Endpoint: ep}).Quotas {
			id, _, end := q.Window(now)
			c := counter{cmp.Or(q.Key, "k:"+key), q.CounterName(id)}
			if slices.Contains(counters, c) {
				continue
			}
			counters = append(counters, c)
			names[c.storeKey] = append(names[c.storeKey], c.name)
			// A nil Location is UTC, and says so.
			out.Quotas = append(out.Quotas, QuotaUsage{Name: q.Name, Per: string(q.Period), Zone: q.Location.String(), Period: id,
				Count: q.Count, ResetsAt: end.UTC(), Org: strings.TrimPrefix(q.Key, rules.OrgKeyPrefix), Shadow: q.Shadow})
		}
	}
	used := map[counter]int64{}
	for sk, ns := range names {
		got, err := s.cfg.Counts.ReadCounts(r.Context(), sk, ns)
		if err != nil {
			return &apiError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("read %s's quota counters: %v", key, err)}
		}
		for i, n := range got {
			used[counter{sk, ns[i]}] = n
		}
	}
	for i := range out.Quotas {
		out.Quotas[i].Used = used[counters[i]]
		out.Quotas[i].Remaining = quota.Remaining(out.Quotas[i].Count, out.Quotas[i].Used)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
