package rulesvc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

// errUnchanged ends the transaction of a rule set that matches what is
// stored: no version is made for it.
var errUnchanged = errors.New("rule set unchanged")

// applyRuleSet answers PUT /admin/v1/ruleset[?dry_run=true]: the body, a
// rules.Document, becomes the rule set in one version. Its rules replace
// every rule but the emergency overrides; its keys and endpoints replace
// the key directory and the endpoints when the document has those sections
// (an absent section is left as it is; an empty one empties it). A rule
// with an id replaces that rule; one without replaces the stored rule of
// the same scope, match and mode, or is added. The answer lists the
// differences; a dry run stores nothing, and a document that matches what
// is stored makes no version.
func (s *Service) applyRuleSet(w http.ResponseWriter, r *http.Request, who string) error {
	var doc rules.Document
	if err := decode(r, &doc); err != nil {
		return err
	}
	dry := false
	if err := query(r, "dry_run", &dry, strconv.ParseBool, nil, "true or false"); err != nil {
		return err
	}
	if err := checkDocument(doc, time.Now()); err != nil {
		return err
	}
	res := admin.Applied{DryRun: dry, Changes: []admin.Change{}}
	apply := func(ctx context.Context, tx pgx.Tx) (outcome, error) {
		changes, touched, err := replaceRuleSet(ctx, tx, doc)
		if err != nil {
			return outcome{}, err
		}
		if len(changes) == 0 && !dry {
			return outcome{}, errUnchanged
		}
		res.Changes = changes
		return outcome{target: "ruleset", touched: touched, after: changes}, nil
	}
	ctx := r.Context()
	if dry {
		b, err := s.tryChange(ctx, apply)
		if err != nil {
			return err
		}
		for i := range res.Changes {
			if res.Changes[i].Op == admin.OpAdd && res.Changes[i].Kind == "rule" {
				res.Changes[i].Rule = 0 // rolled back with the rest
			}
		}
		res.Hash = b.set.Hash
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	_, pub, err := s.commit(ctx, change{who: who, action: "ruleset.apply", apply: apply})
	switch {
	case errors.Is(err, errUnchanged):
		b, err := build(ctx, s.pool)
		if err != nil {
			return err
		}
		res.Hash = b.set.Hash
	case err != nil:
		return err
	default:
		var hash string
		if err := s.pool.QueryRow(ctx, "SELECT hash FROM snapshots WHERE version = $1", pub.Version).Scan(&hash); err != nil {
			return fmt.Errorf("read snapshot %d: %w", pub.Version, err)
		}
		res.Hash, res.Snapshot = hash, &pub
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// tryChange makes a change, compiles the rule set it leaves and rolls it
// all back, under the write lock so that it sees what a commit would.
func (s *Service) tryChange(ctx context.Context, apply func(ctx context.Context, tx pgx.Tx) (outcome, error)) (*built, error) {
	var b *built
	errRollback := errors.New("dry run")
	err := s.locked(ctx, func(tx pgx.Tx) error {
		out, err := apply(ctx, tx)
		if err != nil {
			return err
		}
		if b, err = build(ctx, tx); err != nil {
			return compileError(err, b, out)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		return nil, err
	}
	return b, nil
}

// checkDocument refuses what compiling the rule set would not: a missing
// rules section, rules already expired, IDs that cannot be stored ones,
// refusals that are not free or count, endpoints named twice.
func checkDocument(doc rules.Document, now time.Time) error {
	if doc.Rules == nil {
		return badRequest("rules", "is required: list the rules, or [] for none")
	}
	ids := map[int64]bool{}
	for i, r := range doc.Rules {
		switch {
		case r.ID < 0:
			return badRequest(fmt.Sprintf("rules[%d].id", i), "%d is not a rule ID", r.ID)
		case r.ID > 0 && ids[r.ID]:
			return badRequest(fmt.Sprintf("rules[%d].id", i), "rule %d is listed twice", r.ID)
		case !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(now):
			return badRequest(fmt.Sprintf("rules[%d].expires_at", i), "%s is in the past", r.ExpiresAt.Format(time.RFC3339))
		case r.Refusals != "" && r.Refusals != rules.RefusalsFree && r.Refusals != rules.RefusalsCount:
			// Compiling would say so too, but of the rule as numbered once stored.
			return badRequest(fmt.Sprintf("rules[%d].refusals", i), "%q is not free or count", r.Refusals)
		}
		ids[r.ID] = true
	}
	names := map[string]bool{}
	for i, ep := range doc.Endpoints {
		if names[ep.Name] {
			return badRequest(fmt.Sprintf("endpoints[%d].name", i), "%q is used by an earlier endpoint", ep.Name)
		}
		names[ep.Name] = true
	}
	return nil
}

// ruleName is a rule's scope and match, as a Change names it.
func ruleName(r rules.Rule) string {
	parts := []string{string(r.Scope)}
	for _, kv := range [][2]string{{"plan", r.Match.Plan}, {"endpoint", r.Match.Endpoint}, {"key", r.Match.Key}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if r.Mode == rules.Shadow {
		parts = append(parts, "(shadow)")
	}
	return strings.Join(parts, " ")
}

// normalRule is r as it reads back once stored: the defaults spelt out,
// the expiry in UTC to the microsecond.
func normalRule(r rules.Rule) rules.Rule {
	r.Version = 0 // the service's to set
	r.Mode = cmp.Or(r.Mode, rules.Enforce)
	r.FailMode = cmp.Or(r.FailMode, rules.FailOpen)
	if !r.ExpiresAt.IsZero() {
		r.ExpiresAt = r.ExpiresAt.UTC().Truncate(time.Microsecond)
	}
	return r
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Rules, keys and endpoints are plain data: they always encode.
		return json.RawMessage(`null`)
	}
	return b
}

// replaceRuleSet makes the stored rule set doc's, as applyRuleSet says,
// and returns the changes and the IDs of the rules written.
func replaceRuleSet(ctx context.Context, tx pgx.Tx, doc rules.Document) ([]admin.Change, []int64, error) {
	stored, _, err := readRules(ctx, tx, "WHERE NOT override")
	if err != nil {
		return nil, nil, err
	}
	byID := map[int64]rules.Rule{}
	for i := range stored {
		// A rule's version is the service's record, not the rule's
		// content: compared without it.
		stored[i].Version = 0
		byID[stored[i].ID] = stored[i]
	}
	claimed := map[int64]bool{}
	target := make([]int64, len(doc.Rules)) // the stored rule each replaces; 0 for none
	for i, r := range doc.Rules {
		if r.ID == 0 {
			continue
		}
		if _, ok := byID[r.ID]; !ok {
			return nil, nil, badRequest(fmt.Sprintf("rules[%d].id", i),
				"no stored rule %d (overrides are not part of the rule set): leave id out to add the rule", r.ID)
		}
		target[i], claimed[r.ID] = r.ID, true
	}
	for i, r := range doc.Rules {
		if r.ID != 0 {
			continue
		}
		want := ruleName(normalRule(r))
		for _, old := range stored {
			if !claimed[old.ID] && ruleName(old) == want {
				target[i], claimed[old.ID] = old.ID, true
				break
			}
		}
	}
	var changes, added []admin.Change
	var touched []int64
	for _, old := range stored {
		if claimed[old.ID] {
			continue
		}
		if _, err := tx.Exec(ctx, "DELETE FROM rules WHERE id = $1", old.ID); err != nil {
			return nil, nil, fmt.Errorf("delete rule %d: %w", old.ID, err)
		}
		changes = append(changes, admin.Change{Op: admin.OpRemove, Kind: "rule", Name: ruleName(old), Rule: old.ID, Before: mustJSON(old)})
	}
	for i, r := range doc.Rules {
		r = normalRule(r)
		if id := target[i]; id != 0 {
			r.ID = id
			before, after := mustJSON(byID[id]), mustJSON(r)
			if string(before) == string(after) {
				continue
			}
			if _, err := writeRule(ctx, tx, id, r, false); err != nil {
				return nil, nil, err
			}
			touched = append(touched, id)
			changes = append(changes, admin.Change{Op: admin.OpChange, Kind: "rule", Name: ruleName(r), Rule: id, Before: before, After: after})
			continue
		}
		id, err := writeRule(ctx, tx, 0, r, false)
		if err != nil {
			return nil, nil, err
		}
		r.ID = id
		touched = append(touched, id)
		added = append(added, admin.Change{Op: admin.OpAdd, Kind: "rule", Name: ruleName(r), Rule: id, After: mustJSON(r)})
	}
	slices.SortFunc(changes, func(a, b admin.Change) int { return cmp.Compare(a.Rule, b.Rule) })
	changes = append(changes, added...)
	if doc.Keys != nil {
		cur, err := readKeys(ctx, tx)
		if err != nil {
			return nil, nil, err
		}
		kc, err := replaceEntries(ctx, tx, keyEntries(), cur, doc.Keys)
		if err != nil {
			return nil, nil, err
		}
		changes = append(changes, kc...)
	}
	if doc.Endpoints != nil {
		eps, err := readEndpoints(ctx, tx)
		if err != nil {
			return nil, nil, err
		}
		cur, want := map[string]rules.Endpoint{}, map[string]rules.Endpoint{}
		for _, ep := range eps {
			cur[ep.Name] = ep
		}
		for _, ep := range doc.Endpoints {
			want[ep.Name] = ep
		}
		ec, err := replaceEntries(ctx, tx, endpointEntries(), cur, want)
		if err != nil {
			return nil, nil, err
		}
		changes = append(changes, ec...)
	}
	if changes == nil {
		changes = []admin.Change{}
	}
	return changes, touched, nil
}

// replaceEntries makes the entries of e want, where cur is what is stored,
// and returns the changes by name.
func replaceEntries[T any](ctx context.Context, tx pgx.Tx, e entries[T], cur, want map[string]T) ([]admin.Change, error) {
	names := slices.AppendSeq(slices.Collect(maps.Keys(cur)), maps.Keys(want))
	slices.Sort(names)
	names = slices.Compact(names)
	var changes []admin.Change
	for _, name := range names {
		old, had := cur[name]
		v, keep := want[name]
		c := admin.Change{Kind: e.kind, Name: name}
		switch {
		case !keep:
			if _, err := tx.Exec(ctx, e.remove, name); err != nil {
				return nil, fmt.Errorf("delete %s %q: %w", e.kind, name, err)
			}
			c.Op, c.Before = admin.OpRemove, mustJSON(old)
			changes = append(changes, c)
			continue
		case e.check != nil:
			if err := e.check(name, &v); err != nil {
				return nil, err
			}
		}
		after := mustJSON(v)
		if had && string(mustJSON(old)) == string(after) {
			continue
		}
		if err := e.write(ctx, tx, name, v); err != nil {
			return nil, fmt.Errorf("put %s %q: %w", e.kind, name, err)
		}
		c.Op, c.After = admin.OpAdd, after
		if had {
			c.Op, c.Before = admin.OpChange, mustJSON(old)
		}
		changes = append(changes, c)
	}
	return changes, nil
}
