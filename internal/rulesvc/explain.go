package rulesvc

import (
	"cmp"
	"errors"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

// explain answers GET /admin/v1/explain: why a key is limited on one
// request, from the stable snapshot, the rules table's versions, the
// store (Config.Store) and the refusals the gateways reported.
func (s *Service) explain(w http.ResponseWriter, r *http.Request, _ string) error {
	q := r.URL.Query()
	key, method, path := q.Get("key"), cmp.Or(q.Get("method"), http.MethodGet), q.Get("path")
	if err := rules.CheckKey(key); err != nil {
		return badRequest("key", "%v", err)
	}
	if path == "" || path[0] != '/' {
		return badRequest("path", "%q is not a request path starting with /", path)
	}
	sn := s.state.Load().stable
	if sn == nil {
		return &apiError{status: http.StatusServiceUnavailable, msg: "no rule set is published yet"}
	}
	set, err := sn.set()
	if err != nil {
		return err
	}
	versions, err := s.ruleVersions(r)
	if err != nil {
		return err
	}
	in := admin.ExplainInput{Set: set, Now: time.Now(), Key: key, Method: method, Path: path,
		Versions: versions, Store: s.cfg.Store, Share: s.cfg.Share}
	if region := q.Get("region"); region != "" {
		if s.cfg.Balancer == nil {
			return badRequest("region", "the service is not given the balancer (--balancer-url), so it cannot tell region %q's shares", region)
		}
		if in.Share, err = s.cfg.Balancer.sharesOf(r.Context(), "k:"+key, region); err != nil {
			return &apiError{status: http.StatusBadGateway, field: "region", msg: err.Error()}
		}
	}
	e, err := admin.Build(r.Context(), in)
	if errors.As(err, new(*rules.PathError)) {
		return badRequest("path", "%v", err)
	} else if err != nil {
		return err
	}
	e.LastRefusal = s.refusals.last(e.KeyHash)
	listed := map[int64]bool{}
	for _, l := range e.Limits {
		listed[l.Rule.ID] = l.Rule.ID != 0
	}
	for _, rr := range s.refusals.top(5) {
		if listed[rr.Rule] {
			e.Refused = append(e.Refused, rr)
		}
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// ruleVersions reads each stored rule's version: the snapshot that last
// changed it.
func (s *Service) ruleVersions(r *http.Request) (map[int64]int64, error) {
	out := map[int64]int64{}
	var id, v int64
	err := forEach(r.Context(), s.pool, "rule versions", []any{&id, &v}, func() error {
		out[id] = v
		return nil
	}, "SELECT id, version FROM rules")
	return out, err
}

// refused answers GET /admin/v1/refused: the busiest refused keys of
// each rule version, at most 10 a rule.
func (s *Service) refused(w http.ResponseWriter, r *http.Request, _ string) error {
	writeJSON(w, http.StatusOK, map[string]any{"rules": s.refusals.top(10)})
	return nil
}
