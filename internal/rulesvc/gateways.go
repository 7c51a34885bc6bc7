package rulesvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/keyhash"
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
func (s *Service) serveSnapshot(w http.ResponseWriter, r *http.Request, tok token) error {
	gw, region := r.URL.Query().Get("gateway"), r.URL.Query().Get("region")
	if err := rulesapi.CheckGatewayID(gw); err != nil {
		return badRequest("gateway", "%v", err)
	}
	if err := checkRegion(region); err != nil {
		return err
	}
	if err := tok.binds(gw, region); err != nil {
		return err
	}
	var have int64
	if err := query(r, "after", &have, parseInt, func(v int64) bool { return v >= 0 }, "a snapshot version"); err != nil {
		return err
	}
	wait := s.cfg.PollTimeout
	if err := query(r, "wait", &wait, time.ParseDuration, func(d time.Duration) bool { return d >= 0 }, "a duration"); err != nil {
		return err
	}
	wait = min(wait, s.cfg.PollTimeout)
	if err := s.register(r.Context(), tok, gw, region, have); errors.As(err, new(*apiError)) {
		return err
	} else if err != nil && r.Context().Err() == nil {
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
			// An older version than have is marked a rollback only when
			// have is a canary the service withdrew; any other gateway
			// ahead of this replica refuses it.
			setHeaders(w, st.fleet, canary)
			writeJSON(w, http.StatusOK, rulesapi.Snapshot{Version: sn.version, Hash: sn.hash, Canary: canary,
				Rollback: sn.version < have && st.withdrawn[have], Fleet: st.fleet, Document: sn.doc})
			return nil
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

func checkRegion(region string) error {
	switch {
	case len(region) > 64:
		return badRequest("region", "is %d bytes, longer than 64", len(region))
	case strings.IndexFunc(region, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0:
		return badRequest("region", "%q holds a control character", region)
	}
	return nil
}

func setHeaders(w http.ResponseWriter, f rulesapi.Fleet, canary bool) {
	if b, err := json.Marshal(f); err == nil {
		w.Header().Set(rulesapi.FleetHeader, string(b))
	}
	w.Header().Set(rulesapi.CanaryHeader, map[bool]string{false: "0", true: "1"}[canary])
}

// register records that a gateway polled. A gateway ID belongs to the token
// that registered it while the gateway lives, and a token registers at most
// its maxGateways live gateways: a holder of one token cannot take over the
// gateways of another, nor make up gateways without bound. Two new
// gateways registering at once may pass the bound by one.
func (s *Service) register(ctx context.Context, tok token, gw, region string, version int64) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ttl := s.cfg.GatewayTTL.Seconds()
	// A live gateway polls again: only a new (or revived) one counts
	// against the token's bound.
	tag, err := s.pool.Exec(ctx, `UPDATE gateways SET region = $3, version = $4, last_seen = now()
		WHERE id = $1 AND token = $2 AND last_seen > now() - make_interval(secs => $5)`, gw, tok.name, region, version, ttl)
	if err != nil {
		return fmt.Errorf("register gateway %s: %w", gw, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var owner string
	var ownerLive bool
	err = s.pool.QueryRow(ctx, `SELECT token, last_seen > now() - make_interval(secs => $2) FROM gateways WHERE id = $1`,
		gw, ttl).Scan(&owner, &ownerLive)
	switch {
	case isNoRows(err):
	case err != nil:
		return fmt.Errorf("register gateway %s: %w", gw, err)
	case ownerLive && owner != "":
		// A row without a token comes from before gateway tokens (an older
		// version of the service, or a trusted network): any token may
		// claim it, so an upgrade does not lock its gateways out.
		return &apiError{status: http.StatusForbidden, field: "gateway",
			msg: fmt.Sprintf("gateway ID %q is registered under another token; give each gateway its own ID", gw)}
	}
	var live int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM gateways WHERE token = $1 AND last_seen > now() - make_interval(secs => $2)`,
		tok.name, ttl).Scan(&live); err != nil {
		return fmt.Errorf("register gateway %s: %w", gw, err)
	}
	if live >= tok.maxGateways {
		s.metrics.refusedGateways.Inc()
		label := "token " + tok.name
		if tok.name == "" {
			label = "the trusted network"
		}
		return &apiError{status: http.StatusForbidden, field: "gateway",
			msg: fmt.Sprintf("%s already has %d gateways registered, its most (max_gateways): a new one is refused "+
				"until one stops polling for %v", label, live, s.cfg.GatewayTTL)}
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO gateways (id, region, version, last_seen, token, last_report, report_credit, credit_at)
		VALUES ($1, $2, $3, now(), $4, NULL, $5, now())
		ON CONFLICT (id) DO UPDATE SET region = excluded.region, version = excluded.version, last_seen = now(),
			token = excluded.token, last_report = NULL, report_credit = excluded.report_credit, credit_at = now()`,
		gw, region, version, tok.name, float64(reportBurst))
	if err != nil {
		return fmt.Errorf("register gateway %s: %w", gw, err)
	}
	return nil
}

// binds refuses a gateway ID or region that a per-gateway token is not
// bound to.
func (tok token) binds(gw, region string) error {
	switch {
	case tok.gateway != "" && gw != tok.gateway:
		return &apiError{status: http.StatusForbidden, field: "gateway",
			msg: fmt.Sprintf("token %s is bound to gateway %q; it cannot poll or report as %q", tok.name, tok.gateway, gw)}
	case tok.region != "" && region != tok.region:
		return &apiError{status: http.StatusForbidden, field: "region",
			msg: fmt.Sprintf("token %s is bound to region %q; it cannot poll or report as region %q", tok.name, tok.region, region)}
	}
	return nil
}

// reportBurst is how many reports a gateway may send at once after a
// quiet spell; Config.ReportRate refills them.
const reportBurst = 5

// serveReport stores a gateway's counts: decisions per version for the
// canary, and what shadow rules would have refused. A report is bounded
// in size, content and rate (see rulesapi's MaxReport constants and
// Config.ReportRate) and accepted only from a gateway that polled under
// the same token.
func (s *Service) serveReport(w http.ResponseWriter, r *http.Request, tok token) error {
	var rep rulesapi.Report
	if err := decodeUpTo(r, &rep, rulesapi.MaxReportBytes); err != nil {
		return err
	}
	rows, err := checkReport(&rep)
	if err != nil {
		return err
	}
	refused, err := checkRefusals(&rep)
	if err != nil {
		return err
	}
	if err := tok.binds(rep.Gateway, rep.Region); err != nil {
		return err
	}
	if err := s.checkVersionsExist(r.Context(), &rep); err != nil {
		return err
	}
	var requests int64
	for _, v := range rep.Versions {
		requests += v.Requests // at most 16 counts of 2^40: no overflow
	}
	if err := s.spendReport(r.Context(), w, tok, &rep, requests); err != nil {
		return err
	}
	batch := &pgx.Batch{}
	for _, row := range rows {
		if row.rule == 0 {
			batch.Queue("INSERT INTO decisions (gateway, version, requests, refused) VALUES ($1, $2, $3, $4)",
				rep.Gateway, row.version, row.requests, row.refused)
			continue
		}
		key := row.key
		if key != "" && !s.cfg.ShadowRawKeys {
			key = keyhash.Of(storeKey(key))
		}
		batch.Queue("INSERT INTO shadow_hits (rule_id, version, gateway, key, hits) VALUES ($1, $2, $3, $4, $5)",
			row.rule, row.version, rep.Gateway, key, row.requests)
	}
	if batch.Len() > 0 {
		if err := s.pool.SendBatch(r.Context(), batch).Close(); err != nil {
			return fmt.Errorf("store report of gateway %s: %w", rep.Gateway, err)
		}
	}
	now := time.Now()
	for _, row := range refused {
		s.refusals.add(row.rv, row.key, row.limit, row.n, now)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// storeKey is the store form of a reported key: gateways send "k:KEY" or
// "ip:ADDR"; older ones sent an API key bare.
func storeKey(k string) string {
	if strings.HasPrefix(k, "k:") || strings.HasPrefix(k, "ip:") {
		return k
	}
	return "k:" + k
}

// reportRow is one row a report stores: decisions of a version when rule
// is zero, else hits of a shadow rule's key (key "" holds the hits of keys
// outside the top ones).
type reportRow struct {
	version, rule     int64
	key               string
	requests, refused int64
}

// checkReport validates a report against rulesapi's bounds and returns
// the rows it stores, at most one per version and one per shadow rule and
// top key.
func checkReport(rep *rulesapi.Report) ([]reportRow, error) {
	if err := rulesapi.CheckGatewayID(rep.Gateway); err != nil {
		return nil, badRequest("gateway", "%v", err)
	}
	if err := checkRegion(rep.Region); err != nil {
		return nil, err
	}
	if len(rep.Versions) > rulesapi.MaxReportVersions {
		return nil, badRequest("versions", "%d versions, more than %d", len(rep.Versions), rulesapi.MaxReportVersions)
	}
	count := func(field string, n int64) error {
		if n < 0 || n > rulesapi.MaxReportCount {
			return badRequest(field, "%d is not a count of one report interval (0 to 2^40)", n)
		}
		return nil
	}
	var rows []reportRow
	shadowRules := 0
	seen := map[int64]bool{}
	for i, v := range rep.Versions {
		where := fmt.Sprintf("versions[%d]", i)
		if v.Version <= 0 {
			return nil, badRequest(where+".version", "%d is not a snapshot version", v.Version)
		}
		if seen[v.Version] {
			return nil, badRequest(where+".version", "%d is reported twice", v.Version)
		}
		seen[v.Version] = true
		if err := count(where+".requests", v.Requests); err != nil {
			return nil, err
		}
		if err := count(where+".refused", v.Refused); err != nil {
			return nil, err
		}
		if v.Refused > v.Requests {
			return nil, badRequest(where, "refused %d of %d requests", v.Refused, v.Requests)
		}
		if v.Requests > 0 {
			rows = append(rows, reportRow{version: v.Version, requests: v.Requests, refused: v.Refused})
		}
		if shadowRules += len(v.Shadow); shadowRules > rulesapi.MaxReportShadowRules {
			return nil, badRequest(where+".shadow", "more than %d shadow rules in one report", rulesapi.MaxReportShadowRules)
		}
		rules := map[int64]bool{}
		for j, sh := range v.Shadow {
			where := fmt.Sprintf("%s.shadow[%d]", where, j)
			switch {
			case sh.Rule <= 0:
				return nil, badRequest(where+".rule", "%d is not a rule ID", sh.Rule)
			case rules[sh.Rule]:
				return nil, badRequest(where+".rule", "rule %d is reported twice", sh.Rule)
			case len(sh.TopKeys) > rulesapi.MaxReportTopKeys:
				return nil, badRequest(where+".top_keys", "%d keys, more than %d", len(sh.TopKeys), rulesapi.MaxReportTopKeys)
			}
			rules[sh.Rule] = true
			if err := count(where+".would_refuse", sh.WouldRefuse); err != nil {
				return nil, err
			}
			rest := sh.WouldRefuse
			for k, kc := range sh.TopKeys {
				where := fmt.Sprintf("%s.top_keys[%d]", where, k)
				if err := checkReportKey(kc.Key); err != nil {
					return nil, badRequest(where+".key", "%v", err)
				}
				if err := count(where+".count", kc.Count); err != nil {
					return nil, err
				}
				if rest -= kc.Count; rest < 0 {
					return nil, badRequest(where+".count", "the top keys count more than would_refuse, %d", sh.WouldRefuse)
				}
				if kc.Count > 0 {
					rows = append(rows, reportRow{version: v.Version, rule: sh.Rule, key: kc.Key, requests: kc.Count})
				}
			}
			if rest > 0 {
				rows = append(rows, reportRow{version: v.Version, rule: sh.Rule, requests: rest})
			}
		}
	}
	return rows, nil
}

// checkReportKey refuses a top key no gateway could have counted.
func checkReportKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("is empty")
	case len(k) > rulesapi.MaxReportKey:
		return fmt.Errorf("is %d bytes, longer than %d", len(k), rulesapi.MaxReportKey)
	case strings.IndexFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0:
		return fmt.Errorf("%q holds a control character", k)
	}
	return nil
}

// checkVersionsExist refuses a report of a snapshot version the service
// never made: no gateway can have decided under it.
func (s *Service) checkVersionsExist(ctx context.Context, rep *rulesapi.Report) error {
	if len(rep.Versions) == 0 {
		return nil
	}
	vs := make([]int64, len(rep.Versions))
	for i, v := range rep.Versions {
		vs[i] = v.Version
	}
	found, err := collect(ctx, s.pool, "versions", pgx.RowTo[int64], `SELECT version FROM snapshots WHERE version = ANY($1)`, vs)
	if err != nil {
		return fmt.Errorf("report of gateway %s: %w", rep.Gateway, err)
	}
	for i, v := range vs {
		if !slices.Contains(found, v) {
			s.metrics.refusedReports.Inc()
			return badRequest(fmt.Sprintf("versions[%d].version", i), "snapshot version %d does not exist: "+
				"a gateway reports only versions the service sent", v)
		}
	}
	return nil
}

// spendReport takes one report from the gateway's bucket and records it.
// It refuses a gateway that has not polled under tok (409 or 403), a
// report naming another region than the gateway's polls (400), one
// counting more requests than the gateway could have decided since its
// previous report at Config.MaxGatewayRate (400), and one over the report
// rate (429, with Retry-After). A refused report changes nothing.
func (s *Service) spendReport(ctx context.Context, w http.ResponseWriter, tok token, rep *rulesapi.Report, requests int64) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	gw := rep.Gateway
	const credit = `least($3::float8, report_credit + extract(epoch FROM now() - credit_at) * $4::float8)`
	// credit_at moves only when a report is taken (or the gateway is
	// registered), so it marks the start of the span this report counts.
	const span = `greatest(1, extract(epoch FROM now() - credit_at))`
	tag, err := s.pool.Exec(ctx, `UPDATE gateways SET report_credit = `+credit+` - 1, credit_at = now(), last_report = now()
		WHERE id = $1 AND token = $2 AND `+credit+` >= 1 AND region = $5 AND $6::float8 <= $7::float8 * `+span,
		gw, tok.name, float64(reportBurst), s.cfg.ReportRate, rep.Region, float64(requests), s.cfg.MaxGatewayRate)
	if err != nil {
		return fmt.Errorf("report of gateway %s: %w", gw, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var owner, region string
	var seconds float64
	err = s.pool.QueryRow(ctx, `SELECT token, region, `+span+` FROM gateways WHERE id = $1`, gw).Scan(&owner, &region, &seconds)
	switch {
	case isNoRows(err):
		return &apiError{status: http.StatusConflict, field: "gateway",
			msg: fmt.Sprintf("gateway %q has not polled: a gateway reports only after it polls %s", gw, rulesapi.SnapshotPath)}
	case err != nil:
		return fmt.Errorf("report of gateway %s: %w", gw, err)
	case owner != tok.name:
		return &apiError{status: http.StatusForbidden, field: "gateway",
			msg: fmt.Sprintf("gateway ID %q is registered under another token", gw)}
	}
	s.metrics.refusedReports.Inc()
	switch {
	case region != rep.Region:
		return badRequest("region", "the report names region %q, but gateway %q polls as region %q", rep.Region, gw, region)
	case float64(requests) > s.cfg.MaxGatewayRate*seconds:
		s.log.Warn("rules service: implausible report refused", "gateway", gw, "token", tok.name, "requests", requests,
			"seconds", seconds)
		return badRequest("versions", "gateway %q reports %d requests in the %.1f s since its previous report, more than "+
			"the %v a second one gateway can decide (--max-gateway-rate): refusing the report", gw, requests, seconds, s.cfg.MaxGatewayRate)
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(1/s.cfg.ReportRate)))))
	return &apiError{status: http.StatusTooManyRequests, field: "gateway",
		msg: fmt.Sprintf("gateway %q sends reports faster than %v a second", gw, s.cfg.ReportRate)}
}
