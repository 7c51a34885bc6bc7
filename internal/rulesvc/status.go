package rulesvc

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin"
)

// ShadowRule is what one shadow rule would have refused.
type ShadowRule = admin.ShadowRule

// shadowReport answers GET /admin/v1/shadow?since=DURATION (default 24h):
// each shadow rule's would-be refusals, most first, with its top ten keys.
func (s *Service) shadowReport(w http.ResponseWriter, r *http.Request, _ string) error {
	since := 24 * time.Hour
	if err := query(r, "since", &since, time.ParseDuration, func(d time.Duration) bool { return d > 0 }, "a positive duration"); err != nil {
		return err
	}
	ctx := r.Context()
	out, err := collect(ctx, s.pool, "shadow hits", func(row pgx.CollectableRow) (ShadowRule, error) {
		sr := ShadowRule{TopKeys: []admin.KeyCount{}}
		err := row.Scan(&sr.Rule, &sr.WouldRefuse)
		return sr, err
	}, `SELECT rule_id, `+saturated("sum(hits)")+` FROM shadow_hits
		WHERE at >= now() - make_interval(secs => $1) GROUP BY rule_id ORDER BY 2 DESC, 1`, since.Seconds())
	if err != nil {
		return err
	}
	at := map[int64]int{}
	for i, sr := range out {
		at[sr.Rule] = i
	}
	var id int64
	var kc admin.KeyCount
	err = forEach(ctx, s.pool, "shadow keys", []any{&id, &kc.Key, &kc.Count}, func() error {
		if i, ok := at[id]; ok {
			out[i].TopKeys = append(out[i].TopKeys, kc)
		}
		return nil
	}, `SELECT rule_id, key, total FROM (
			SELECT rule_id, key, `+saturated("sum(hits)")+` AS total,
				row_number() OVER (PARTITION BY rule_id ORDER BY sum(hits) DESC, key) AS rank
			FROM shadow_hits WHERE at >= now() - make_interval(secs => $1) AND key <> ''
			GROUP BY rule_id, key) t
		WHERE rank <= 10 ORDER BY rule_id, rank`, since.Seconds())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"since": since.String(), "rules": out})
	return nil
}

// Rollout is one version's rollout as the admin API shows it.
type Rollout = admin.Rollout

// RolloutStatus is the answer of GET /admin/v1/rollout.
type RolloutStatus = admin.RolloutStatus

func (s *Service) rollout(w http.ResponseWriter, r *http.Request, _ string) error {
	ctx := r.Context()
	var st RolloutStatus
	if err := s.pool.QueryRow(ctx, "SELECT max(version) FROM rollouts WHERE state = 'promoted'").Scan(&st.Stable); err != nil {
		return fmt.Errorf("read stable version: %w", err)
	}
	var err error
	st.Rollouts, err = collect(ctx, s.pool, "rollouts", func(row pgx.CollectableRow) (Rollout, error) {
		var ro Rollout
		err := row.Scan(&ro.Version, &ro.State, &ro.Emergency, &ro.Canaries, &ro.StartedAt, &ro.DecidedAt, &ro.Reason, &ro.Compared)
		return ro, err
	}, `SELECT version, state, emergency, canaries, started_at, decided_at, reason, compared
		FROM rollouts ORDER BY version DESC LIMIT 20`)
	if err != nil {
		return err
	}
	for i := range st.Rollouts {
		ro := &st.Rollouts[i]
		if ro.State != "canary" {
			continue
		}
		can, rest, err := canaryCounts(ctx, s.pool, ro.Version, ro.Canaries, ro.StartedAt, s.cfg.Canary.MinSample)
		if err != nil {
			return err
		}
		ro.Canary, ro.Rest = &can.Side, &rest.Side
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// Gateway is one gateway that polled within the gateway TTL.
type Gateway = admin.Gateway

// fleet answers GET /admin/v1/fleet: the gateways that polled, the version
// each last said it runs, and which of them count in the fleet.
func (s *Service) fleet(w http.ResponseWriter, r *http.Request, _ string) error {
	gws, err := collect(r.Context(), s.pool, "gateways", pgx.RowToStructByPos[Gateway], `SELECT id, region, version, token, last_seen, last_report,
			coalesce(`+liveGateways+`, false)
		FROM gateways WHERE last_seen > now() - make_interval(secs => $1) ORDER BY region, id`, s.cfg.GatewayTTL.Seconds())
	if err != nil {
		return err
	}
	f := admin.FleetCounts{Regions: map[string]int{}}
	for _, g := range gws {
		if g.Counted {
			f.Total++
			f.Regions[g.Region]++
		}
	}
	writeJSON(w, http.StatusOK, admin.Fleet{Counts: f, Gateways: gws})
	return nil
}
