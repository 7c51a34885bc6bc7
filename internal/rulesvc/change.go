package rulesvc

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

// change is one admin change: the transaction applies it, compiles the
// whole would-be rule set, publishes a snapshot and writes the audit row,
// or does none of it.
type change struct {
	who    string
	action string // such as "rule.create"
	// emergency changes skip the canary: overrides and their removal.
	emergency bool
	// apply makes the change in tx.
	apply func(ctx context.Context, tx pgx.Tx) (outcome, error)
}

// outcome is what apply did, for the audit log.
type outcome struct {
	target        string  // such as "rules/12"
	ruleID        int64   // the rule written: commit sets its version and reads it back as after
	created       bool    // ruleID is new: a compile error naming it has no ID to show
	touched       []int64 // further rules written: commit sets their version
	before, after any
}

// Published says where a change went.
type Published = admin.Published

// locked runs f in a transaction that holds the write lock, which
// serializes changes so that each snapshot holds every change made before
// it; the lock is per schema.
func (s *Service) locked(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('sluice.write.' || current_schema()))"); err != nil {
			return fmt.Errorf("take write lock: %w", err)
		}
		return f(tx)
	})
}

// commitAnswer commits c and answers the request with status, the snapshot
// published and the changed thing as it is after.
func (s *Service) commitAnswer(w http.ResponseWriter, r *http.Request, status int, c change) error {
	out, pub, err := s.commit(r.Context(), c)
	if err != nil {
		return err
	}
	writeJSON(w, status, changed{Snapshot: pub, After: out.after})
	return nil
}

// commit runs c in one transaction.
func (s *Service) commit(ctx context.Context, c change) (outcome, Published, error) {
	var out outcome
	var pub Published
	err := s.locked(ctx, func(tx pgx.Tx) error {
		var err error
		if out, err = c.apply(ctx, tx); err != nil {
			return err
		}
		b, err := build(ctx, tx)
		if err != nil {
			return compileError(err, b, out)
		}
		b.changed = out.touched
		if out.ruleID != 0 {
			b.changed = append(slices.Clone(out.touched), out.ruleID)
		}
		if pub, err = s.publish(ctx, tx, b, c.emergency); err != nil {
			return err
		}
		if out.ruleID != 0 {
			// An override published beside a running canary is the
			// emergency snapshot's: the version the fleet runs.
			ruleVersion := pub.Version
			if c.emergency {
				ruleVersion = cmp.Or(pub.Emergency, pub.Version)
			}
			if _, err := tx.Exec(ctx, "UPDATE rules SET version = $1, updated_at = now() WHERE id = $2",
				ruleVersion, out.ruleID); err != nil {
				return fmt.Errorf("set rule %d version: %w", out.ruleID, err)
			}
			if out.after, err = readRule(ctx, tx, out.ruleID); err != nil {
				return err
			}
		}
		if len(out.touched) > 0 {
			if _, err := tx.Exec(ctx, "UPDATE rules SET version = $1, updated_at = now() WHERE id = ANY($2)",
				pub.Version, out.touched); err != nil {
				return fmt.Errorf("set rules' version: %w", err)
			}
		}
		if err := audit(ctx, tx, c.who, c.action, out.target, out.before, out.after, pub.Version); err != nil {
			return err
		}
		return s.notify(ctx, tx)
	})
	if err != nil {
		return outcome{}, Published{}, err
	}
	s.metrics.changes.WithLabelValues(c.action).Inc()
	// NOTIFY reaches this replica too; reloading now answers its own
	// gateways without waiting for the round trip.
	if err := s.reload(ctx); err != nil {
		s.log.Warn("rules service: reload after change failed", "err", err)
	}
	return out, pub, nil
}

// compileError turns a rule set that does not compile into a 422 that
// names the rule and field.
func compileError(err error, b *built, out outcome) error {
	var fe *rules.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	ae := &apiError{status: http.StatusUnprocessableEntity, field: fe.Field, msg: fe.Error()}
	var i int
	if _, serr := fmt.Sscanf(fe.Where, "rules[%d]", &i); serr == nil && b != nil && i >= 0 && i < len(b.doc.Rules) {
		id := b.doc.Rules[i].ID
		if !(out.created && id == out.ruleID) {
			ae.rule = id
			ae.msg = "rule " + strconv.FormatInt(id, 10) + " " + fe.Error()
		}
		if id != out.ruleID {
			// The change broke another rule: the field is that rule's.
			ae.field = ""
		}
	}
	return ae
}

// publish stores b as a snapshot and starts its rollout. An emergency
// change goes to everyone at once; if a canary is running, or halted, the
// emergency version is the stable snapshot plus the overrides, and b
// follows as the next canary.
func (s *Service) publish(ctx context.Context, tx pgx.Tx, b *built, emergency bool) (Published, error) {
	if s.cfg.Canary.Disabled {
		v, err := s.startRollout(ctx, tx, b, "promoted", emergency, "")
		return Published{Version: v, Rollout: "promoted"}, err
	}
	if !emergency {
		first, err := stableHasNoRules(ctx, tx)
		if err != nil {
			return Published{}, err
		}
		if first {
			// The fleet enforces nothing yet: a canary would compare the
			// new rules' refusals with "nothing refused", and leave the rest
			// of the fleet without limits for its window.
			v, err := s.startRollout(ctx, tx, b, "promoted", false,
				"first rules: the stable version enforces no rules, so there is nothing to compare a canary with")
			return Published{Version: v, Rollout: "promoted"}, err
		}
		v, err := s.startRollout(ctx, tx, b, "canary", false, "")
		return Published{Version: v, Rollout: "canary"}, err
	}
	var stableDoc []byte
	var stableOverrides []int64
	err := tx.QueryRow(ctx, `SELECT s.document, s.override_ids FROM snapshots s
		WHERE s.version = (SELECT max(version) FROM rollouts WHERE state = 'promoted')`).Scan(&stableDoc, &stableOverrides)
	if err != nil {
		return Published{}, fmt.Errorf("read stable snapshot: %w", err)
	}
	var stable rules.Document
	if err := json.Unmarshal(stableDoc, &stable); err != nil {
		return Published{}, fmt.Errorf("decode stable snapshot: %w", err)
	}
	e, err := withOverrides(stable, stableOverrides, b)
	if err != nil {
		return Published{}, fmt.Errorf("lay overrides over the stable snapshot: %w", err)
	}
	if e.set.Hash == b.set.Hash {
		v, err := s.startRollout(ctx, tx, b, "promoted", true, "")
		return Published{Version: v, Rollout: "promoted"}, err
	}
	ev, err := s.startRollout(ctx, tx, e, "promoted", true, "")
	if err != nil {
		return Published{}, err
	}
	if err := b.adopt(ev); err != nil {
		return Published{}, fmt.Errorf("compile the canary snapshot: %w", err)
	}
	v, err := s.startRollout(ctx, tx, b, "canary", false, "")
	return Published{Version: v, Rollout: "canary", Emergency: ev}, err
}

// stableHasNoRules reports whether the stable snapshot holds no rules, as
// a new database's version 1 does (keys and endpoints limit nothing).
func stableHasNoRules(ctx context.Context, tx pgx.Tx) (bool, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT CASE jsonb_typeof(s.document->'rules') WHEN 'array' THEN jsonb_array_length(s.document->'rules') ELSE 0 END
		FROM snapshots s
		WHERE s.version = (SELECT max(version) FROM rollouts WHERE state = 'promoted')`).Scan(&n)
	if isNoRows(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read stable snapshot: %w", err)
	}
	return n == 0, nil
}

// startRollout inserts b as a snapshot with a rollout in the given state,
// "canary" or "promoted". Either ends a running canary: a newer canary
// replaces it, and a promoted version would otherwise sit below it. reason
// says why a promoted one skipped the canary; "" means the usual reason.
func (s *Service) startRollout(ctx context.Context, tx pgx.Tx, b *built, st string, emergency bool, reason string) (int64, error) {
	v, err := b.insert(ctx, tx)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "UPDATE rollouts SET state = 'superseded', decided_at = now(), reason = $1 WHERE state = 'canary'",
		fmt.Sprintf("superseded by version %d", v)); err != nil {
		return 0, fmt.Errorf("supersede canary: %w", err)
	}
	if st == "promoted" {
		_, err := tx.Exec(ctx, `INSERT INTO rollouts (version, state, emergency, decided_at, reason)
			VALUES ($1, 'promoted', $2, now(), $3)`, v, emergency, cmp.Or(reason,
			map[bool]string{false: "canary disabled", true: "emergency override: skips the canary"}[emergency]))
		if err != nil {
			return 0, fmt.Errorf("insert rollout %d: %w", v, err)
		}
		return v, nil
	}
	canaries, err := s.pickCanaries(ctx, tx, v)
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO rollouts (version, state, canaries) VALUES ($1, 'canary', $2)`, v, canaries)
	if err != nil {
		return 0, fmt.Errorf("insert rollout %d: %w", v, err)
	}
	return v, nil
}

// pickCanaries chooses about Canary.Fraction of the gateways that count in
// the fleet (they poll and report, so a canary's counts can be compared),
// at least one, by a hash of the version and gateway ID: stable for a version,
// different gateways for different versions.
func (s *Service) pickCanaries(ctx context.Context, q querier, version int64) ([]string, error) {
	ids, err := collect(ctx, q, "gateways", pgx.RowTo[string], `SELECT id FROM gateways WHERE `+liveGateways, s.cfg.GatewayTTL.Seconds())
	if err != nil {
		return nil, err
	}
	return chooseCanaries(ids, version, s.cfg.Canary.Fraction), nil
}

func chooseCanaries(ids []string, version int64, fraction float64) []string {
	if len(ids) == 0 {
		return []string{}
	}
	rank := func(id string) uint64 {
		h := sha256.New()
		_ = binary.Write(h, binary.BigEndian, version)
		h.Write([]byte(id))
		return binary.BigEndian.Uint64(h.Sum(nil))
	}
	sorted := slices.Clone(ids)
	slices.SortFunc(sorted, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	n := max(1, int(math.Ceil(fraction*float64(len(ids)))))
	return sorted[:n]
}

func audit(ctx context.Context, tx pgx.Tx, who, action, target string, before, after any, version int64) error {
	var enc [2][]byte // before and after as JSON; nil for none
	for i, v := range []any{before, after} {
		if v == nil {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("audit: encode %s: %w", [2]string{"before", "after"}[i], err)
		}
		enc[i] = b
	}
	var ver *int64
	if version != 0 {
		ver = &version
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit (who, action, target, before, after, version) VALUES ($1, $2, $3, $4, $5, $6)`,
		who, action, target, enc[0], enc[1], ver)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}
