package rulesvc

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/rules"
)

// entries is a table of named entries that rules refer to: the key
// directory or the endpoints. Their handlers are the same but for these.
type entries[T any] struct {
	kind   string                                                        // "key" or "endpoint": the audit action is kind.put, kind.delete
	path   string                                                        // "keys" or "endpoints": the audit target is path/name
	read   func(ctx context.Context, q querier, name string) (*T, error) // nil, nil when there is none
	write  func(ctx context.Context, tx pgx.Tx, name string, v T) error
	remove string // SQL deleting the entry named $1
	// check fixes up or refuses a body for the entry named name.
	check func(name string, v *T) error
}

func keyEntries() entries[rules.KeyInfo] {
	return entries[rules.KeyInfo]{
		kind: "key", path: "keys",
		read: func(ctx context.Context, q querier, key string) (*rules.KeyInfo, error) {
			var info rules.KeyInfo
			err := q.QueryRow(ctx, "SELECT plan, org FROM api_keys WHERE key = $1", key).Scan(&info.Plan, &info.Org)
			return &info, err
		},
		write: func(ctx context.Context, tx pgx.Tx, key string, info rules.KeyInfo) error {
			_, err := tx.Exec(ctx, `INSERT INTO api_keys (key, plan, org) VALUES ($1, $2, $3)
				ON CONFLICT (key) DO UPDATE SET plan = excluded.plan, org = excluded.org, updated_at = now()`,
				key, info.Plan, info.Org)
			return err
		},
		remove: "DELETE FROM api_keys WHERE key = $1",
		check: func(key string, _ *rules.KeyInfo) error {
			if err := rules.CheckKey(key); err != nil {
				return badRequest("key", "%v", err)
			}
			return nil
		},
	}
}

func endpointEntries() entries[rules.Endpoint] {
	return entries[rules.Endpoint]{
		kind: "endpoint", path: "endpoints",
		read: func(ctx context.Context, q querier, name string) (*rules.Endpoint, error) {
			ep := rules.Endpoint{Name: name}
			var cost int64
			err := q.QueryRow(ctx, "SELECT method, path, case_sensitive, cost, cost_header FROM endpoints WHERE name = $1",
				name).Scan(&ep.Method, &ep.Path, &ep.CaseSensitive, &cost, &ep.CostHeader)
			ep.Cost = rules.Tokens(cost)
			return &ep, err
		},
		write: func(ctx context.Context, tx pgx.Tx, name string, ep rules.Endpoint) error {
			_, err := tx.Exec(ctx, `INSERT INTO endpoints (name, method, path, case_sensitive, cost, cost_header) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (name) DO UPDATE SET method = excluded.method, path = excluded.path,
				case_sensitive = excluded.case_sensitive, cost = excluded.cost, cost_header = excluded.cost_header, updated_at = now()`,
				name, ep.Method, ep.Path, ep.CaseSensitive, int64(ep.Cost), ep.CostHeader)
			return err
		},
		remove: "DELETE FROM endpoints WHERE name = $1",
		check: func(name string, ep *rules.Endpoint) error {
			if ep.Name != "" && ep.Name != name {
				return badRequest("name", "%q does not match the path's %q", ep.Name, name)
			}
			ep.Name = name
			return nil
		},
	}
}

// find reads the entry called name; nil when there is none.
func (e entries[T]) find(ctx context.Context, q querier, name string) (*T, error) {
	v, err := e.read(ctx, q, name)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %q: %w", e.kind, name, err)
	}
	return v, nil
}

func getEntry[T any](s *Service, e entries[T]) func(w http.ResponseWriter, r *http.Request, _ string) error {
	return func(w http.ResponseWriter, r *http.Request, _ string) error {
		name := r.PathValue("name")
		v, err := e.find(r.Context(), s.pool, name)
		if err != nil {
			return err
		}
		if v == nil {
			return notFound("no %s %q", e.kind, name)
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}

func putEntry[T any](s *Service, e entries[T]) func(w http.ResponseWriter, r *http.Request, who string) error {
	return func(w http.ResponseWriter, r *http.Request, who string) error {
		name := r.PathValue("name")
		var v T
		if err := decode(r, &v); err != nil {
			return err
		}
		if err := e.check(name, &v); err != nil {
			return err
		}
		return s.commitAnswer(w, r, http.StatusOK, change{who: who, action: e.kind + ".put",
			apply: func(ctx context.Context, tx pgx.Tx) (outcome, error) {
				before, err := e.find(ctx, tx, name)
				if err != nil {
					return outcome{}, err
				}
				if err := e.write(ctx, tx, name, v); err != nil {
					return outcome{}, fmt.Errorf("put %s %q: %w", e.kind, name, err)
				}
				return outcome{target: e.path + "/" + name, before: nilIfNone(before), after: v}, nil
			}})
	}
}

func deleteEntry[T any](s *Service, e entries[T]) func(w http.ResponseWriter, r *http.Request, who string) error {
	return func(w http.ResponseWriter, r *http.Request, who string) error {
		name := r.PathValue("name")
		return s.commitAnswer(w, r, http.StatusOK, change{who: who, action: e.kind + ".delete",
			apply: func(ctx context.Context, tx pgx.Tx) (outcome, error) {
				before, err := e.find(ctx, tx, name)
				if err != nil {
					return outcome{}, err
				}
				if before == nil {
					return outcome{}, notFound("no %s %q", e.kind, name)
				}
				if _, err := tx.Exec(ctx, e.remove, name); err != nil {
					return outcome{}, fmt.Errorf("delete %s %q: %w", e.kind, name, err)
				}
				return outcome{target: e.path + "/" + name, before: before}, nil
			}})
	}
}
