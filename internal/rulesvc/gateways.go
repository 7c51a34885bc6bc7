package rulesvc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/rulesapi"
)

// assigned returns the snapshot gateway gw should run: the canary version
// when it is one of the canaries, else the stable one.
func (st *state) assigned(gw string) (sn *snap, canary bool) {
	if st.canary != nil && st.canaries[gw] {
		return st.canary, true
	}
	return st.stable, false
}

// serveSnapshot is the gateways' long poll.
func (s *Service) serveSnapshot(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	gw, region := q.Get("gateway"), q.Get("region")
	if err := rulesapi.CheckGatewayID(gw); err != nil {
		return badRequest("gateway", "%v", err)
	}
	if len(region) > 64 {
		return badRequest("region", "is %d bytes, longer than 64", len(region))
	}
	var have int64
	if a := q.Get("after"); a != "" {
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil || v < 0 {
			return badRequest("after", "%q is not a snapshot version", a)
		}
		have = v
	}
	wait := s.cfg.PollTimeout
	if ws := q.Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			return badRequest("wait", "%q is not a duration", ws)
		}
		wait = min(d, wait)
	}
	if err := s.register(r.Context(), gw, region, have); err != nil && r.Context().Err() == nil {
		// The snapshot in memory is still good: serve it without the
		// database, which only loses this poll from the fleet count.
		s.log.Warn("rules service: gateway not registered", "gateway", gw, "err", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := s.waitChange()
		st := s.state.Load()
		sn, canary := st.assigned(gw)
		if sn.version != have {
			return writeSnapshot(w, st, sn, canary)
		}
		select {
		case <-changed:
		case <-timer.C:
			st = s.state.Load()
			_, canary = st.assigned(gw)
			setHeaders(w, st.fleet, canary)
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-r.Context().Done():
			return nil
		case <-s.stopped:
			return &apiError{status: http.StatusServiceUnavailable, msg: "rules service is shutting down"}
		}
	}
}

func setHeaders(w http.ResponseWriter, f rulesapi.Fleet, canary bool) {
	if b, err := json.Marshal(f); err == nil {
		w.Header().Set(rulesapi.FleetHeader, string(b))
	}
	w.Header().Set(rulesapi.CanaryHeader, map[bool]string{false: "0", true: "1"}[canary])
}

func writeSnapshot(w http.ResponseWriter, st *state, sn *snap, canary bool) error {
	setHeaders(w, st.fleet, canary)
	writeJSON(w, http.StatusOK, rulesapi.Snapshot{Version: sn.version, Hash: sn.hash, Canary: canary,
		Fleet: st.fleet, Document: sn.doc})
	return nil
}

// register records that a gateway polled, so it counts in the fleet.
func (s *Service) register(ctx context.Context, gw, region string, version int64) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO gateways (id, region, version, last_seen) VALUES ($1, $2, $3, now())
		ON CONFLICT (id) DO UPDATE SET region = excluded.region, version = excluded.version, last_seen = now()`,
		gw, region, version)
	if err != nil {
		return fmt.Errorf("register gateway %s: %w", gw, err)
	}
	return nil
}

// maxReportVersions bounds one report, so a gateway cannot make the service
// write without limit.
const (
	maxReportVersions = 16
	maxReportRules    = 256
	maxReportKeys     = 20
)

// serveReport stores a gateway's counts: decisions per version for the
// canary, and what shadow rules would have refused.
func (s *Service) serveReport(w http.ResponseWriter, r *http.Request) error {
	var rep rulesapi.Report
	if err := decode(r, &rep); err != nil {
		return err
	}
	if err := rulesapi.CheckGatewayID(rep.Gateway); err != nil {
		return badRequest("gateway", "%v", err)
	}
	if len(rep.Versions) > maxReportVersions {
		return badRequest("versions", "%d versions, more than %d", len(rep.Versions), maxReportVersions)
	}
	batch := &pgx.Batch{}
	for i, v := range rep.Versions {
		if v.Requests < 0 || v.Refused < 0 || v.Refused > v.Requests {
			return badRequest(fmt.Sprintf("versions[%d]", i), "refused %d of %d requests", v.Refused, v.Requests)
		}
		if len(v.Shadow) > maxReportRules {
			return badRequest(fmt.Sprintf("versions[%d].shadow", i), "%d rules, more than %d", len(v.Shadow), maxReportRules)
		}
		if v.Requests > 0 {
			batch.Queue("INSERT INTO decisions (gateway, version, requests, refused) VALUES ($1, $2, $3, $4)",
				rep.Gateway, v.Version, v.Requests, v.Refused)
		}
		for j, sh := range v.Shadow {
			if len(sh.TopKeys) > maxReportKeys {
				return badRequest(fmt.Sprintf("versions[%d].shadow[%d].top_keys", i, j), "%d keys, more than %d",
					len(sh.TopKeys), maxReportKeys)
			}
			rest := sh.WouldRefuse
			for _, k := range sh.TopKeys {
				if k.Count <= 0 {
					continue
				}
				batch.Queue("INSERT INTO shadow_hits (rule_id, version, gateway, key, hits) VALUES ($1, $2, $3, $4, $5)",
					sh.Rule, v.Version, rep.Gateway, k.Key, k.Count)
				rest -= k.Count
			}
			if rest > 0 {
				// The key "" holds hits of keys outside the top ones.
				batch.Queue("INSERT INTO shadow_hits (rule_id, version, gateway, key, hits) VALUES ($1, $2, $3, '', $4)",
					sh.Rule, v.Version, rep.Gateway, rest)
			}
		}
	}
	if batch.Len() > 0 {
		if err := s.pool.SendBatch(r.Context(), batch).Close(); err != nil {
			return fmt.Errorf("store report of gateway %s: %w", rep.Gateway, err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
