package rulesvc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	var doc rules.Document
	if err := json.Unmarshal(st.stable.doc, &doc); err != nil {
		return fmt.Errorf("usage: read snapshot %d: %w", st.stable.version, err)
	}
	set, err := rules.Compile(doc, st.stable.version)
	if err != nil {
		return fmt.Errorf("usage: compile snapshot %d: %w", st.stable.version, err)
	}
	now := time.Now()
	eps := []string{""}
	for _, ep := range doc.Endpoints {
		eps = append(eps, ep.Name)
	}
	out := Usage{Key: key, Quotas: []QuotaUsage{}}
	var names []string
	seen := map[string]bool{}
	for _, ep := range eps {
		for _, q := range set.Resolve(now, rules.Query{APIKey: key, Endpoint: ep}).Quotas {
			id, _, end := q.Window(now)
			name := q.CounterName(id)
			if seen[name] {
				continue
			}
			seen[name] = true
			zone := "UTC"
			if q.Location != nil {
				zone = q.Location.String()
			}
			names = append(names, name)
			out.Quotas = append(out.Quotas, QuotaUsage{Name: q.Name, Per: string(q.Period), Zone: zone, Period: id,
				Count: q.Count, ResetsAt: end.UTC()})
		}
	}
	if len(names) > 0 {
		used, err := s.cfg.Counts.ReadCounts(r.Context(), "k:"+key, names)
		if err != nil {
			return &apiError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("read %s's quota counters: %v", key, err)}
		}
		for i := range out.Quotas {
			out.Quotas[i].Used = used[i]
			out.Quotas[i].Remaining = quota.Remaining(out.Quotas[i].Count, used[i])
		}
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
