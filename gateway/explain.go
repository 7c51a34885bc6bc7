package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// ExplainPath is where Explain is served on the gateway's metrics
// address: the rules service's path, so that one client (admin.Client,
// sluice explain) asks either.
const ExplainPath = admin.Prefix + admin.ExplainPath

// ExplainConfig configures Explain. The zero value of every field but
// Rules means its default.
type ExplainConfig struct {
	// Rules supplies the rule set in force. Required.
	Rules RuleSource
	// Store, if set, is read for the key's bucket of each enforced limit
	// in force, never taken from (admin.ExplainInput.Store): give the
	// shared store itself (pipeline.Pipeline.Redis, or a memstore), not a
	// layer with leases or a refusal cache. Nil leaves the state out.
	Store limit.Store
	// Share, if set, gives this region's share of a limit for a store key
	// (share.Store.Share as a fraction of share.Whole). Nil shows none.
	Share func(storeKey, limitName string) (limit.Fraction, bool)
	// Source names where the rules come from in each rule's source: the
	// rules file's path. Empty means "rules service".
	Source string
	// Now is the time rules are resolved at. Nil means time.Now.
	Now func() time.Time
}

// Explain returns a read-only handler of GET ExplainPath?key=&method=&path=,
// which answers an admin.Explanation from the gateway's own rules and
// store: what the rules service's explain answers, less the refusals it
// gathers from every gateway. It shows a key's plan and organisation, so
// serve it where only operators reach it, as the metrics address is.
func Explain(cfg ExplainConfig) (http.Handler, error) {
	if cfg.Rules == nil {
		return nil, errors.New("gateway: ExplainConfig.Rules is nil")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeExplainError(w, http.StatusMethodNotAllowed, "", "explain answers GET only")
			return
		}
		set := cfg.Rules.Current()
		if set == nil {
			writeExplainError(w, http.StatusServiceUnavailable, "", "the gateway has no rules yet")
			return
		}
		q := r.URL.Query()
		method, path := cmp.Or(q.Get("method"), http.MethodGet), q.Get("path")
		if path == "" || path[0] != '/' {
			writeExplainError(w, http.StatusBadRequest, "path", "path "+strconv.Quote(path)+" is not a request path starting with /")
			return
		}
		e, err := admin.Build(r.Context(), admin.ExplainInput{Set: set, Now: cfg.Now(), Key: q.Get("key"), Method: method, Path: path,
			Source: cfg.Source, Store: cfg.Store, Share: cfg.Share})
		if err != nil {
			field := "key"
			if errors.Is(err, rules.ErrPathSpelling) {
				field = "path"
			}
			writeExplainError(w, http.StatusBadRequest, field, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(e)
	}), nil
}

// writeExplainError answers as the rules service's admin API does, so
// that admin.Client reads the error alike from either.
func writeExplainError(w http.ResponseWriter, status int, field, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
		Field string `json:"field,omitempty"`
	}{msg, field})
}
