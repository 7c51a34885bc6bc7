package rulesvc

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin"
)

// Side is what one side of a canary reported: the canary gateways of the
// new version, or the rest of the fleet of the stable version. Its Rate
// weighs each gateway's requests up to Canary.MinSample: gateways that
// reported a full sample weigh the same whatever counts they claim, so no
// gateway outweighs another that served as much real traffic, and its
// sums are shown, not judged.
type Side struct {
	admin.Side
	// weight is the sum of the gateways' weights; the side is judged once
	// it reaches MinSample.
	weight float64
}

// gatewayCounts is what one gateway reported on one side.
type gatewayCounts struct {
	gateway           string
	canary            bool
	requests, refused int64
}

// sideOf combines what the gateways of one side reported: each gateway's
// refusal rate, weighed by its requests capped at sample.
func sideOf(gws []gatewayCounts, sample int64) Side {
	var s Side
	var refusedW float64
	for _, g := range gws {
		if g.requests <= 0 {
			continue
		}
		s.Gateways++
		s.Requests = satAdd(s.Requests, g.requests)
		s.Refused = satAdd(s.Refused, g.refused)
		w := float64(min(g.requests, max(sample, 1)))
		s.weight += w
		refusedW += w * float64(min(g.refused, g.requests)) / float64(g.requests)
	}
	if s.weight > 0 {
		s.Rate = refusedW / s.weight
	}
	return s
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// verdict is what judge decides about a running canary.
type verdict int

const (
	keepGoing verdict = iota
	halt
	promote
)

// judge decides a canary from its sides: halt when the comparison is
// possible and the canary refuses more than threshold above the rest;
// else promote once the window is over. A comparison needs MinSample of
// weight on each side (see Side.Rate) and MinGateways distinct gateways
// reporting, both sides together. Without it at the window's end, the
// canary keeps running while mayWait (the fleet is large enough for a
// comparison and MaxWait has not passed), and is then promoted: compared
// says whether the comparison was made, and a promotion without it says
// so in its reason. It is pure, so tests drive it with numbers.
func judge(canary, rest Side, c Canary, windowOver, mayWait bool) (v verdict, reason string, compared bool) {
	need := float64(c.MinSample)
	compared = canary.Gateways > 0 && rest.Gateways > 0 && canary.weight >= need && rest.weight >= need &&
		canary.Gateways+rest.Gateways >= c.MinGateways
	describe := func() string {
		return fmt.Sprintf("canary refused %.4f of requests (%d of %d, %d gateways), the rest %.4f (%d of %d, %d gateways)",
			canary.Rate, canary.Refused, canary.Requests, canary.Gateways, rest.Rate, rest.Refused, rest.Requests, rest.Gateways)
	}
	if compared && canary.Rate-rest.Rate > c.Threshold {
		return halt, fmt.Sprintf("%s: more than %.4f higher", describe(), c.Threshold), true
	}
	if !windowOver {
		return keepGoing, "", compared
	}
	if !compared && mayWait {
		return keepGoing, "", false
	}
	if !compared {
		return promote, fmt.Sprintf("canary window over, promoted WITHOUT COMPARISON: %s; a comparison needs %d requests "+
			"on each side and %d gateways reporting", describe(), c.MinSample, c.MinGateways), false
	}
	return promote, "canary window over: " + describe(), true
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
			waitOver   bool
		)
		err := tx.QueryRow(ctx, `SELECT version, canaries, started_at, now() >= started_at + make_interval(secs => $1),
				now() >= started_at + make_interval(secs => $1 + $2)
			FROM rollouts WHERE state = 'canary' ORDER BY version DESC LIMIT 1 FOR UPDATE SKIP LOCKED`,
			s.cfg.Canary.Window.Seconds(), s.cfg.Canary.MaxWait.Seconds()).Scan(&v, &canaries, &started, &windowOver, &waitOver)
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
		can, rest, err := canaryCounts(ctx, tx, v, canaries, started, s.cfg.Canary.MinSample)
		if err != nil {
			return err
		}
		// Waiting for samples helps only a fleet with enough gateways to
		// compare, and a rest besides the canaries.
		fleet := s.state.Load().fleet.Total
		mayWait := !waitOver && fleet >= s.cfg.Canary.MinGateways && fleet > len(canaries)
		verd, reason, compared := judge(can, rest, s.cfg.Canary, windowOver, mayWait)
		st := map[verdict]string{halt: "halted", promote: "promoted"}[verd]
		if st == "" {
			return nil
		}
		if err := s.decide(ctx, tx, "sluice", v, st, reason, &compared, map[string]any{"canary_counts": can, "rest_counts": rest}); err != nil {
			return err
		}
		changed = true
		if compared {
			s.log.Info("rules service: rollout decided", "version", v, "state", st, "reason", reason)
		} else {
			uncompared = true
			s.log.Warn("rules service: canary promoted without comparison", "version", v, "reason", reason)
		}
		return nil
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

// decide ends the canary of version v as st, "promoted" or "halted", for
// reason, and writes the audit row, which shows extra besides the decision.
// compared is nil for a decision by hand, which compares nothing.
func (s *Service) decide(ctx context.Context, tx pgx.Tx, who string, v int64, st, reason string, compared *bool, extra map[string]any) error {
	if _, err := tx.Exec(ctx, "UPDATE rollouts SET state = $1, decided_at = now(), reason = $2, compared = $3 WHERE version = $4",
		st, reason, compared, v); err != nil {
		return fmt.Errorf("decide rollout %d: %w", v, err)
	}
	after := map[string]any{"version": v, "state": st, "reason": reason}
	if compared != nil {
		after["compared"] = *compared
	}
	maps.Copy(after, extra)
	if err := audit(ctx, tx, who, "rollout."+st, fmt.Sprintf("rollouts/%d", v), nil, after, v); err != nil {
		return err
	}
	return s.notify(ctx, tx)
}

// saturated is a sum of counts as a bigint: PostgreSQL sums bigints as
// numeric, which cannot overflow, and the result is capped at the largest
// bigint, so rows that add up beyond it cannot break a read.
func saturated(sum string) string {
	return "least(coalesce(" + sum + ", 0), 9223372036854775807)::bigint"
}

// baselineLookback is how long before a canary started the rest's reports
// of the stable version count in its baseline: gateways outside a canary
// report every 5 s, so a window of a few seconds alone would hold few of
// their reports.
const baselineLookback = 30 * time.Second

// canaryCounts reads the two sides of the canary of version v: what the
// canaries reported of v since it started, and what the other gateways
// reported of promoted versions below v since baselineLookback before
// then. Reports of any other version, or of a canary's stable version,
// count on neither side. Sums saturate; sample caps each gateway's weight.
func canaryCounts(ctx context.Context, q querier, v int64, canaries []string, since time.Time, sample int64) (can, rest Side, err error) {
	var g gatewayCounts
	var cs, rs []gatewayCounts
	err = forEach(ctx, q, "decisions", []any{&g.gateway, &g.canary, &g.requests, &g.refused}, func() error {
		if g.canary {
			cs = append(cs, g)
		} else {
			rs = append(rs, g)
		}
		return nil
	}, `SELECT gateway, gateway = ANY($2), `+saturated("sum(requests)")+`, `+saturated("sum(refused)")+`
		FROM decisions
		WHERE (gateway = ANY($2) AND version = $1 AND at >= $3)
			OR (NOT gateway = ANY($2) AND at >= $3 - make_interval(secs => $4)
				AND version IN (SELECT version FROM rollouts WHERE state = 'promoted' AND version < $1))
		GROUP BY 1, 2`, v, canaries, since, baselineLookback.Seconds())
	if err != nil {
		return Side{}, Side{}, fmt.Errorf("count canary decisions of %d: %w", v, err)
	}
	return sideOf(cs, sample), sideOf(rs, sample), nil
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
		err := s.locked(r.Context(), func(tx pgx.Tx) error {
			err := tx.QueryRow(r.Context(), `SELECT version FROM rollouts WHERE state = 'canary'
				ORDER BY version DESC LIMIT 1 FOR UPDATE`).Scan(&v)
			if isNoRows(err) {
				return &apiError{status: http.StatusConflict, msg: "no canary is running"}
			}
			if err != nil {
				return fmt.Errorf("read canary: %w", err)
			}
			return s.decide(r.Context(), tx, who, v, st, fmt.Sprintf("%s by %s: %s", st, who, body.Reason), nil, nil)
		})
		if err != nil {
			return err
		}
		if err := s.reload(r.Context()); err != nil {
			s.log.Warn("rules service: reload after rollout decision failed", "err", err)
		}
		writeJSON(w, http.StatusOK, admin.Decision{Version: v, State: st})
		return nil
	}
}
