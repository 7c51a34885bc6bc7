package rulesvc

import (
	"context"
	"fmt"
	"net/http"
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
// rest; else promote once the window is over. It is pure, so tests drive it
// with numbers.
func judge(canary, rest Side, c Canary, windowOver bool) (verdict, string) {
	if canary.Requests >= c.MinSample && rest.Requests >= c.MinSample && canary.Rate()-rest.Rate() > c.Threshold {
		return halt, fmt.Sprintf("canary refused %.4f of requests (%d of %d), the rest %.4f (%d of %d): more than %.4f higher",
			canary.Rate(), canary.Refused, canary.Requests, rest.Rate(), rest.Refused, rest.Requests, c.Threshold)
	}
	if windowOver {
		return promote, fmt.Sprintf("canary window over: canary refused %.4f (%d of %d), the rest %.4f (%d of %d)",
			canary.Rate(), canary.Refused, canary.Requests, rest.Rate(), rest.Refused, rest.Requests)
	}
	return keepGoing, ""
}

// evaluate decides the running canary, if any. Every replica runs it; the
// row lock lets one decide at a time.
func (s *Service) evaluate(ctx context.Context) error {
	changed := false
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
		verd, reason := judge(can, rest, s.cfg.Canary, windowOver)
		st := map[verdict]string{halt: "halted", promote: "promoted"}[verd]
		if st == "" {
			return nil
		}
		changed = true
		if _, err := tx.Exec(ctx, "UPDATE rollouts SET state = $1, decided_at = now(), reason = $2 WHERE version = $3",
			st, reason, v); err != nil {
			return fmt.Errorf("decide rollout %d: %w", v, err)
		}
		after := map[string]any{"version": v, "state": st, "reason": reason}
		if err := audit(ctx, tx, "sluice", "rollout."+st, fmt.Sprintf("rollouts/%d", v), nil, after, v); err != nil {
			return err
		}
		s.log.Info("rules service: rollout decided", "version", v, "state", st, "reason", reason)
		return s.notify(ctx, tx)
	})
	if err != nil {
		return err
	}
	if changed {
		return s.reload(ctx)
	}
	return nil
}

// canaryCounts sums what the canaries reported of version v, and what the
// other gateways reported, since the canary started.
func canaryCounts(ctx context.Context, q querier, v int64, canaries []string, since time.Time) (can, rest Side, err error) {
	err = q.QueryRow(ctx, `SELECT
			coalesce(sum(requests) FILTER (WHERE gateway = ANY($2) AND version = $1), 0),
			coalesce(sum(refused)  FILTER (WHERE gateway = ANY($2) AND version = $1), 0),
			coalesce(sum(requests) FILTER (WHERE NOT gateway = ANY($2)), 0),
			coalesce(sum(refused)  FILTER (WHERE NOT gateway = ANY($2)), 0)
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
		if body.Reason == "" {
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
