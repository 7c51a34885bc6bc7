package rulesvc

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

// AdminPrefix is where the admin API lives.
const AdminPrefix = "/admin/v1"

// adminRoute is one endpoint of the admin API.
type adminRoute struct {
	method, path string // path below AdminPrefix
	h            http.Handler
}

// adminRouteTable is every endpoint of the admin API: what the mux serves,
// and what the OpenAPI description must list.
func (s *Service) adminRouteTable() []adminRoute {
	var rs []adminRoute
	route := func(method, path string, need Role, h func(w http.ResponseWriter, r *http.Request, who string) error) {
		rs = append(rs, adminRoute{method, path, s.authorized(need, func(w http.ResponseWriter, r *http.Request, t token) error {
			return h(w, r, t.name)
		})})
	}
	route("GET", "/rules", RoleRead, s.listRules(""))
	route("POST", "/rules", RoleWrite, s.createRule)
	route("POST", "/rules/validate", RoleRead, s.validateRule)
	route("GET", "/rules/{id}", RoleRead, s.getRule)
	route("PUT", "/rules/{id}", RoleWrite, s.replaceRule)
	route("DELETE", "/rules/{id}", RoleWrite, s.deleteRule)
	keys, eps := keyEntries(), endpointEntries()
	route("GET", "/keys/{name}", RoleRead, getEntry(s, keys))
	route("PUT", "/keys/{name}", RoleWrite, putEntry(s, keys))
	route("DELETE", "/keys/{name}", RoleWrite, deleteEntry(s, keys))
	route("GET", "/endpoints", RoleRead, s.listEndpoints)
	route("GET", "/endpoints/{name}", RoleRead, getEntry(s, eps))
	route("PUT", "/endpoints/{name}", RoleWrite, putEntry(s, eps))
	route("DELETE", "/endpoints/{name}", RoleWrite, deleteEntry(s, eps))
	route("GET", "/overrides", RoleRead, s.listRules("WHERE override"))
	route("PUT", "/overrides/{key}", RoleWrite, s.putOverride)
	route("DELETE", "/overrides/{key}", RoleWrite, s.deleteOverride)
	route("GET", "/audit", RoleRead, s.listAudit)
	route("GET", "/shadow", RoleRead, s.shadowReport)
	route("GET", "/rollout", RoleRead, s.rollout)
	route("POST", "/rollout/promote", RoleWrite, s.decideByHand("promoted"))
	route("POST", "/rollout/halt", RoleWrite, s.decideByHand("halted"))
	route("GET", "/fleet", RoleRead, s.fleet)
	route("PUT", "/ruleset", RoleWrite, s.applyRuleSet)
	route("GET", "/usage/{key}", RoleRead, s.usage)
	route("GET", admin.ExplainPath, RoleRead, s.explain)
	route("GET", admin.RefusedPath, RoleRead, s.refused)
	// The description is public: it holds no data.
	rs = append(rs, adminRoute{"GET", "/openapi.json", http.HandlerFunc(serveOpenAPI)})
	return rs
}

func (s *Service) adminRoutes(mux *http.ServeMux) {
	for _, rt := range s.adminRouteTable() {
		mux.Handle(rt.method+" "+AdminPrefix+rt.path, rt.h)
	}
	mux.HandleFunc(AdminPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("no admin endpoint %s %s", r.Method, r.URL.Path))
	})
}

// RuleView is a stored rule as the admin API shows it.
type RuleView = admin.RuleView

// changed is the answer to a successful change.
type changed struct {
	Snapshot Published `json:"snapshot"`
	After    any       `json:"after,omitempty"`
}

func readRule(ctx context.Context, q querier, id int64) (*RuleView, error) {
	vs, err := readRuleViews(ctx, q, "WHERE id = $1", id)
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 {
		return nil, notFound("no rule %d", id)
	}
	return &vs[0], nil
}

// readRuleViews reads the rules a WHERE clause selects, in ID order.
func readRuleViews(ctx context.Context, q querier, where string, args ...any) ([]RuleView, error) {
	return collect(ctx, q, "rules", func(row pgx.CollectableRow) (RuleView, error) {
		var v RuleView
		var err error
		v.Rule, v.Override, err = scanRule(row, &v.Version, &v.CreatedAt, &v.UpdatedAt)
		return v, err
	}, "SELECT "+ruleColumns+", version, created_at, updated_at FROM rules "+where+" ORDER BY id", args...)
}

// listRules answers with the rules a WHERE clause selects: all of them,
// or the overrides.
func (s *Service) listRules(where string) func(w http.ResponseWriter, r *http.Request, _ string) error {
	return func(w http.ResponseWriter, r *http.Request, _ string) error {
		views, err := readRuleViews(r.Context(), s.pool, where)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"rules": views})
		return nil
	}
}

func ruleID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("id", "%q is not a rule ID", r.PathValue("id"))
	}
	return id, nil
}

func (s *Service) getRule(w http.ResponseWriter, r *http.Request, _ string) error {
	id, err := ruleID(r)
	if err != nil {
		return err
	}
	v, err := readRule(r.Context(), s.pool, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// decodeRule reads a rule from the body and checks what the rule set's
// compilation cannot: the ID, which must be id or none (any, when id is
// -1), and whether it has already expired.
func decodeRule(r *http.Request, id int64) (rules.Rule, error) {
	var rule rules.Rule
	if err := decode(r, &rule); err != nil {
		return rule, err
	}
	if id >= 0 && rule.ID != 0 && rule.ID != id {
		return rule, badRequest("id", "is assigned by the service; %d does not match the path", rule.ID)
	}
	if !rule.ExpiresAt.IsZero() && !rule.ExpiresAt.After(time.Now()) {
		return rule, badRequest("expires_at", "%s is in the past", rule.ExpiresAt.Format(time.RFC3339))
	}
	return rule, nil
}

// writeRule stores rule as the rule id, or as a new rule when id is 0, and
// returns its ID. The mode and fail mode are stored with their defaults
// spelt out, the quotas as [] when there are none, never null.
func writeRule(ctx context.Context, tx pgx.Tx, id int64, rule rules.Rule, override bool) (int64, error) {
	match, err := json.Marshal(rule.Match)
	if err != nil {
		return 0, err
	}
	lims, err := json.Marshal(rule.Limits)
	if err != nil {
		return 0, err
	}
	if rule.Quotas == nil {
		rule.Quotas = []rules.Quota{}
	}
	quotas, err := json.Marshal(rule.Quotas)
	if err != nil {
		return 0, err
	}
	var expires *time.Time
	if !rule.ExpiresAt.IsZero() {
		t := rule.ExpiresAt.UTC()
		expires = &t
	}
	const cols = "scope, match, limits, mode, fail_mode, expires_at, reason, quotas, concurrency, refusals"
	args := []any{rule.Scope, match, lims, string(cmp.Or(rule.Mode, rules.Enforce)), string(cmp.Or(rule.FailMode, rules.FailOpen)),
		expires, rule.Reason, quotas, rule.Concurrency, string(rule.Refusals)}
	if id != 0 {
		_, err = tx.Exec(ctx, "UPDATE rules SET ("+cols+") = ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) WHERE id = $11",
			append(args, id)...)
		if err != nil {
			return 0, fmt.Errorf("update rule %d: %w", id, err)
		}
		return id, nil
	}
	err = tx.QueryRow(ctx, "INSERT INTO rules ("+cols+", override, version)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0) RETURNING id", append(args, override)...).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert rule: %w", err)
	}
	return id, nil
}

func (s *Service) createRule(w http.ResponseWriter, r *http.Request, who string) error {
	rule, err := decodeRule(r, 0)
	if err != nil {
		return err
	}
	return s.commitAnswer(w, r, http.StatusCreated, change{who: who, action: "rule.create",
		apply: func(ctx context.Context, tx pgx.Tx) (outcome, error) {
			id, err := writeRule(ctx, tx, 0, rule, false)
			return outcome{target: fmt.Sprintf("rules/%d", id), ruleID: id, created: true}, err
		}})
}

// replaceApply is the change PUT /rules/{id} makes, shared with validate.
func replaceApply(id int64, rule rules.Rule) func(ctx context.Context, tx pgx.Tx) (outcome, error) {
	return func(ctx context.Context, tx pgx.Tx) (outcome, error) {
		before, err := readRule(ctx, tx, id)
		if err != nil {
			return outcome{}, err
		}
		if before.Override {
			return outcome{}, &apiError{status: http.StatusConflict, field: "id",
				msg: fmt.Sprintf("rule %d is an emergency override: change it through %s/overrides/%s", id, AdminPrefix, before.Match.Key)}
		}
		if _, err := writeRule(ctx, tx, id, rule, false); err != nil {
			return outcome{}, err
		}
		return outcome{target: fmt.Sprintf("rules/%d", id), ruleID: id, before: before}, nil
	}
}

func (s *Service) replaceRule(w http.ResponseWriter, r *http.Request, who string) error {
	id, err := ruleID(r)
	if err != nil {
		return err
	}
	rule, err := decodeRule(r, id)
	if err != nil {
		return err
	}
	return s.commitAnswer(w, r, http.StatusOK, change{who: who, action: "rule.replace", apply: replaceApply(id, rule)})
}

func (s *Service) deleteRule(w http.ResponseWriter, r *http.Request, who string) error {
	id, err := ruleID(r)
	if err != nil {
		return err
	}
	return s.commitAnswer(w, r, http.StatusOK, change{who: who, action: "rule.delete",
		apply: func(ctx context.Context, tx pgx.Tx) (outcome, error) {
			before, err := readRule(ctx, tx, id)
			if err != nil {
				return outcome{}, err
			}
			if _, err := tx.Exec(ctx, "DELETE FROM rules WHERE id = $1", id); err != nil {
				return outcome{}, fmt.Errorf("delete rule %d: %w", id, err)
			}
			return outcome{target: fmt.Sprintf("rules/%d", id), before: before}, nil
		}})
}

// Validation is the answer of POST /admin/v1/rules/validate.
type Validation = admin.Validation

// validateRule compiles the rule set as it would be with the body's rule
// added (or, with an id, replaced) and saves nothing.
func (s *Service) validateRule(w http.ResponseWriter, r *http.Request, _ string) error {
	rule, err := decodeRule(r, -1)
	if err != nil {
		return err
	}
	apply := replaceApply(rule.ID, rule)
	if rule.ID == 0 {
		apply = func(ctx context.Context, tx pgx.Tx) (outcome, error) {
			id, err := writeRule(ctx, tx, 0, rule, false)
			return outcome{ruleID: id, created: true}, err
		}
	}
	b, err := s.tryChange(r.Context(), apply)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, Validation{Valid: true, Hash: b.set.Hash})
	return nil
}

// nilIfNone keeps a missing value out of the audit log as JSON null rather
// than a typed nil.
func nilIfNone[T any](p *T) any {
	if p == nil {
		return nil
	}
	return p
}

func (s *Service) listEndpoints(w http.ResponseWriter, r *http.Request, _ string) error {
	eps, err := readEndpoints(r.Context(), s.pool)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"endpoints": eps})
	return nil
}

// Override is the body of PUT /admin/v1/overrides/{key}.
type Override = admin.Override

func (s *Service) putOverride(w http.ResponseWriter, r *http.Request, who string) error {
	key := r.PathValue("key")
	var o Override
	if err := decode(r, &o); err != nil {
		return err
	}
	now := time.Now()
	switch {
	case rules.CheckKey(key) != nil:
		return badRequest("key", "%v", rules.CheckKey(key))
	case strings.TrimSpace(o.Reason) == "":
		return badRequest("reason", "is required: say why this key is overridden")
	case o.ExpiresAt.IsZero():
		return badRequest("expires_at", "is required: every override expires")
	case !o.ExpiresAt.After(now):
		return badRequest("expires_at", "%s is in the past", o.ExpiresAt.Format(time.RFC3339))
	case o.ExpiresAt.Sub(now) > s.cfg.MaxOverride:
		return badRequest("expires_at", "%s is %v from now, beyond the longest override, %v",
			o.ExpiresAt.Format(time.RFC3339), o.ExpiresAt.Sub(now).Round(time.Second), s.cfg.MaxOverride)
	}
	rule := rules.Rule{Scope: rules.ScopeKey, Match: rules.Match{Key: key}, Limits: o.Limits,
		FailMode: o.FailMode, ExpiresAt: o.ExpiresAt, Reason: o.Reason}
	return s.commitAnswer(w, r, http.StatusOK, change{who: who, action: "override.put", emergency: true,
		apply: func(ctx context.Context, tx pgx.Tx) (outcome, error) {
			before, err := takeOverride(ctx, tx, key)
			if err != nil {
				return outcome{}, err
			}
			id, err := writeRule(ctx, tx, 0, rule, true)
			return outcome{target: "overrides/" + key, ruleID: id, created: true, before: nilIfNone(before)}, err
		}})
}

// takeOverride deletes the override of key, if there is one, and returns
// it as it was; nil for none.
func takeOverride(ctx context.Context, tx pgx.Tx, key string) (*RuleView, error) {
	var id int64
	err := tx.QueryRow(ctx, "SELECT id FROM rules WHERE override AND match->>'key' = $1", key).Scan(&id)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read override: %w", err)
	}
	before, err := readRule(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM rules WHERE id = $1", id); err != nil {
		return nil, fmt.Errorf("delete override of key %q: %w", key, err)
	}
	return before, nil
}

func (s *Service) deleteOverride(w http.ResponseWriter, r *http.Request, who string) error {
	key := r.PathValue("key")
	return s.commitAnswer(w, r, http.StatusOK, change{who: who, action: "override.delete", emergency: true,
		apply: func(ctx context.Context, tx pgx.Tx) (outcome, error) {
			before, err := takeOverride(ctx, tx, key)
			if err != nil {
				return outcome{}, err
			}
			if before == nil {
				return outcome{}, notFound("no override of key %q", key)
			}
			return outcome{target: "overrides/" + key, before: before}, nil
		}})
}

// AuditEntry is one row of the audit log.
type AuditEntry = admin.AuditEntry

// listAudit answers the newest entries first: ?limit=N (at most 1000) and
// ?before=ID to page on.
func (s *Service) listAudit(w http.ResponseWriter, r *http.Request, _ string) error {
	limit, before := int64(100), int64(1<<62)
	for name, p := range map[string]*int64{"limit": &limit, "before": &before} {
		if err := query(r, name, p, parseInt, func(n int64) bool { return n > 0 }, "a positive number"); err != nil {
			return err
		}
	}
	entries, err := collect(r.Context(), s.pool, "audit", func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.Who, &e.Action, &e.Target, &e.Before, &e.After, &e.Version)
		return e, err
	}, `SELECT id, at, who, action, target, before, after, version FROM audit
		WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, min(limit, 1000))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
	return nil
}
