package rulesvc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Side is the decisions one side of a canary reported.
type Side struct {
	Requests int64 `json:"requests"`
	Refused  int64 `json:"refused"`
}

// Rate is the fraction of requests refused; zero without requests.
func (s Side) Rate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Refused) / float64(s.Requests)
}

// verdict is what judge decides about a running canary.
type verdict int

const (
	keepGoing verdict = iota
	halt
	promote
)

// judge decides a canary from its counts: halt when both sides have the
// minimum sample and the canary refuses more than threshold above the
// rest; else promote once the window is over. compared says whether both
// sides had the minimum sample: a promotion without it says so in its
// reason. It is pure, so tests drive it with numbers.
func judge(canary, rest Side, c Canary, windowOver bool) (v verdict, reason string, compared bool) {
	compared = canary.Requests >= c.MinSample && rest.Requests >= c.MinSample
	if compared && canary.Rate()-rest.Rate() > c.Threshold {
		return halt, fmt.Sprintf("canary refused %.4f of requests (%d of %d), the rest %.4f (%d of %d): more than %.4f higher",
			canary.Rate(), canary.Refused, canary.Requests, rest.Rate(), rest.Refused, rest.Requests, c.Threshold), true
	}
	if !windowOver {
		return keepGoing, "", compared
	}
	if !compared {
		return promote, fmt.Sprintf("canary window over, promoted WITHOUT COMPARISON: the canary reported %d requests "+
			"and the rest %d, and each side needs %d before refusal rates are compared", canary.Requests, rest.Requests,
			c.MinSample), false
	}
	return promote, fmt.Sprintf("canary window over: canary refused %.4f (%d of %d), the rest %.4f (%d of %d)",
		canary.Rate(), canary.Refused, canary.Requests, rest.Rate(), rest.Refused, rest.Requests), true
}

// evaluate decides the running canary, if any. Every replica runs it; the
// row lock lets one decide at a time.
func (s *Service) evaluate(ctx context.Context) error {
	changed, uncompared := false, false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			v          int64
			canaries   []string
			started    time.Time
			windowOver bool
		)
		err := tx.QueryRow(ctx, `SELECT version, canaries, started_at, now() >= started_at + make_interval(secs => $1)
			FROM rollouts WHERE state = 'canary' ORDER BY version DESC LIMIT 1 FOR UPDATE SKIP LOCKED`,
			s.cfg.Canary.Window.Seconds()).Scan(&v, &canaries, &started, &windowOver)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read canary: %w", err)
		}
		if len(canaries) == 0 {
			// No gateway was subscribed when the version was made: choose
			// now, and start the window when the canary does.
			if canaries, err = s.pickCanaries(ctx, tx, v); err != nil || len(canaries) == 0 {
				return err
			}
			changed = true
			if _, err := tx.Exec(ctx, "UPDATE rollouts SET canaries = $1, started_at = now() WHERE version = $2", canaries, v); err != nil {
				return fmt.Errorf("set canaries of %d: %w", v, err)
			}
			return s.notify(ctx, tx)
		}
		can, rest, err := canaryCounts(ctx, tx, v, canaries, started)
		if err != nil {
			return err
		}
		verd, reason, compared := judge(can, rest, s.cfg.Canary, windowOver)
		st := map[verdict]string{halt: "halted", promote: "promoted"}[verd]
		if st == "" {
			return nil
		}
		changed = true
		if _, err := tx.Exec(ctx, "UPDATE rollouts SET state = $1, decided_at = now(), reason = $2, compared = $3 WHERE version = $4",
			st, reason, compared, v); err != nil {
			return fmt.Errorf("decide rollout %d: %w", v, err)
		}
		after := map[string]any{"version": v, "state": st, "reason": reason, "compared": compared,
			"canary_counts": can, "rest_counts": rest}
		if err := audit(ctx, tx, "sluice", "rollout."+st, fmt.Sprintf("rollouts/%d", v), nil, after, v); err != nil {
			return err
		}
		if compared {
			s.log.Info("rules service: rollout decided", "version", v, "state", st, "reason", reason)
		} else {
			uncompared = true
			s.log.Warn("rules service: canary promoted without comparison", "version", v, "reason", reason)
		}
		return s.notify(ctx, tx)
	})
	if err != nil {
		return err
	}
	if uncompared {
		s.metrics.uncompared.Inc()
	}
	if changed {
		return s.reload(ctx)
	}
	return nil
}

// saturated is a sum of counts as a bigint: PostgreSQL sums bigints as
// numeric, which cannot overflow, and the result is capped at the largest
// bigint, so rows that add up beyond it cannot break a read.
func saturated(sum string) string {
	return "least(coalesce(" + sum + ", 0), 9223372036854775807)::bigint"
}

// canaryCounts sums what the canaries reported of version v, and what the
// other gateways reported, since the canary started. Sums saturate.
func canaryCounts(ctx context.Context, q querier, v int64, canaries []string, since time.Time) (can, rest Side, err error) {
	err = q.QueryRow(ctx, `SELECT `+
		saturated("sum(requests) FILTER (WHERE gateway = ANY($2) AND version = $1)")+`, `+
		saturated("sum(refused) FILTER (WHERE gateway = ANY($2) AND version = $1)")+`, `+
		saturated("sum(requests) FILTER (WHERE NOT gateway = ANY($2))")+`, `+
		saturated("sum(refused) FILTER (WHERE NOT gateway = ANY($2))")+`
		FROM decisions WHERE at >= $3`, v, canaries, since).Scan(&can.Requests, &can.Refused, &rest.Requests, &rest.Refused)
	if err != nil {
		err = fmt.Errorf("count canary decisions of %d: %w", v, err)
	}
	return can, rest, err
}

// decideByHand promotes or halts the running canary on an operator's word:
// POST /admin/v1/rollout/promote or /halt, with {"reason": "..."}.
func (s *Service) decideByHand(st string) func(w http.ResponseWriter, r *http.Request, who string) error {
	return func(w http.ResponseWriter, r *http.Request, who string) error {
		var body struct {
			Reason string `json:"reason"`
		}
		if err := decode(r, &body); err != nil {
			return err
		}
		if strings.TrimSpace(body.Reason) == "" {
			return badRequest("reason", "is required: say why the rollout is %s by hand", st)
		}
		var v int64
		err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(r.Context(), writeLockSQL); err != nil {
				return fmt.Errorf("take write lock: %w", err)
			}
			err := tx.QueryRow(r.Context(), `SELECT version FROM rollouts WHERE state = 'canary'
				ORDER BY version DESC LIMIT 1 FOR UPDATE`).Scan(&v)
			if isNoRows(err) {
				return &apiError{status: http.StatusConflict, msg: "no canary is running"}
			}
			if err != nil {
				return fmt.Errorf("read canary: %w", err)
			}
			reason := fmt.Sprintf("%s by %s: %s", st, who, body.Reason)
			if _, err := tx.Exec(r.Context(), "UPDATE rollouts SET state = $1, decided_at = now(), reason = $2 WHERE version = $3",
				st, reason, v); err != nil {
				return fmt.Errorf("decide rollout %d: %w", v, err)
			}
			after := map[string]any{"version": v, "state": st, "reason": reason}
			if err := audit(r.Context(), tx, who, "rollout."+st, fmt.Sprintf("rollouts/%d", v), nil, after, v); err != nil {
				return err
			}
			return s.notify(r.Context(), tx)
		})
		if err != nil {
			return err
		}
		if err := s.reload(r.Context()); err != nil {
			s.log.Warn("rules service: reload after rollout decision failed", "err", err)
		}
		writeJSON(w, http.StatusOK, map[string]any{"version": v, "state": st})
		return nil
	}
}
