package balancersvc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/balancersvc"
	"github.com/sluice-rl/sluice/internal/proctest"
)

// Credentials of the tests: one token per region, one bound to a single
// gateway, and an operator's.
const (
	usToken  = "us-token-0123456789"
	euToken  = "eu-token-0123456789"
	eu1Token = "eu-1-token-0123456789"
	opsToken = "ops-token-0123456789"
)

var testTokens = []balancersvc.Token{
	{Name: "us", Secret: usToken, Region: "us"},
	{Name: "eu", Secret: euToken, Region: "eu"},
	{Name: "eu-1", Secret: eu1Token, Region: "eu", Gateway: "eu-1"},
	{Name: "ops", Secret: opsToken},
}

// call sends one request with a bearer token (none when token is empty)
// under the given scheme, and returns the status and body.
func call(t *testing.T, method, url, scheme, token string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", scheme+" "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// counter returns the value of one metric sample with the given labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestRegionTokenForgesNothingElsewhere runs a balancer with a token per
// region over HTTP, and real clients of us and eu, us serving a busy key.
// Then the holder of eu's token tries the review's attack on us: a report
// as us's real gateway stamped far in the future (which used to make the
// balancer drop that gateway's real reports as overtaken), a fake gateway
// of us claiming 10^15 of demand, a poll of us's shares, a look-up of the
// busy key; and, in its own region, a report from the future and one as a
// gateway its token is not bound to. Every one is refused and counted, and
// us's shares do not move.
func TestRegionTokenForgesNothingElsewhere(t *testing.T) {
	var log proctest.Buffer
	h := serve(t, balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us", "eu"}}, Tokens: testTokens, Interval: 50 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	h.run()
	ctx, reg, wg, hs := h.ctx, h.reg, h.wg, struct{ URL string }{h.url}
	us := startRegion(t, ctx, wg, hs.URL, "us", usToken).store
	startRegion(t, ctx, wg, hs.URL, "eu", eu1Token)
	defer hammer(ctx, us, "k:busy")()
	waitFor(t, "us to hold 95% of k:busy", func() bool { return us.Share("k:busy", "s") == 950_000 })
	waitFor(t, "us's default share to follow its traffic", func() bool { return us.Share("k:quiet", "s") == 950_000 })

	far := time.Now().Add(24 * time.Hour).UnixMilli()
	attacks := []struct {
		what         string
		method, path string
		token        string
		body         any
		want         int
		reason       string
	}{
		{"report as us's gateway, from the future", http.MethodPost, balancer.ReportPath, euToken,
			balancer.Report{Region: "us", Gateway: "us-1", SpanMillis: 1000, SentMillis: far}, http.StatusForbidden, balancersvc.ReasonRegion},
		{"a fake gateway of us claiming 10^15", http.MethodPost, balancer.ReportPath, euToken,
			balancer.Report{Region: "us", Gateway: "us-9", SpanMillis: 1000, Total: 1e15,
				Pairs: []balancer.PairReport{{Key: "k:busy", Limit: "s", Asked: 1e15}}}, http.StatusForbidden, balancersvc.ReasonRegion},
		{"poll us's shares", http.MethodGet, balancer.SharesPath + "?region=us&wait=0s", euToken, nil, http.StatusForbidden, balancersvc.ReasonRegion},
		{"look up the busy key", http.MethodGet, balancer.KeyPath + "k:busy", euToken, nil, http.StatusForbidden, balancersvc.ReasonRegion},
		{"report as eu's own gateway, from the future", http.MethodPost, balancer.ReportPath, euToken,
			balancer.Report{Region: "eu", Gateway: "eu-1", SpanMillis: 1000, SentMillis: far}, http.StatusBadRequest, balancer.ReasonClock},
		{"report as another eu gateway with eu-1's token", http.MethodPost, balancer.ReportPath, eu1Token,
			balancer.Report{Region: "eu", Gateway: "eu-2", SpanMillis: 1000, Total: 1e6}, http.StatusForbidden, balancersvc.ReasonGateway},
		{"an operator's token reports", http.MethodPost, balancer.ReportPath, opsToken,
			balancer.Report{Region: "us", Gateway: "us-1", SpanMillis: 1000}, http.StatusForbidden, balancersvc.ReasonRegion},
		{"no token", http.MethodPost, balancer.ReportPath, "",
			balancer.Report{Region: "us", Gateway: "us-1", SpanMillis: 1000}, http.StatusUnauthorized, balancersvc.ReasonToken},
	}
	for range 3 { // over several rebalances
		for _, a := range attacks {
			if code, body := call(t, a.method, hs.URL+a.path, "Bearer", a.token, a.body); code != a.want {
				t.Errorf("%s: got %d %s, want %d", a.what, code, body, a.want)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range attacks {
		if n := counter(t, reg, "sluice_balancer_refused_total", map[string]string{"reason": a.reason}); n < 3 {
			t.Errorf("%s: sluice_balancer_refused_total{reason=%q} is %v, want at least 3", a.what, a.reason, n)
		}
	}
	for _, want := range []string{`"msg":"balancer call refused","reason":"region","region":"eu"`, `"reason":"clock"`, `"reason":"gateway"`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the balancer's log lacks %s:\n%s", want, log.String())
		}
	}
	reportsBefore := counter(t, reg, "sluice_balancer_reports_total", map[string]string{"region": "us"})
	time.Sleep(300 * time.Millisecond)
	if got := us.Share("k:busy", "s"); got != 950_000 {
		t.Errorf("us's share of k:busy after eu's forgeries: got %d, want 950000 still", got)
	}
	if got := us.Share("k:quiet", "s"); got != 950_000 {
		t.Errorf("us's default share after eu's forgeries: got %d, want 950000 still", got)
	}
	if after := counter(t, reg, "sluice_balancer_reports_total", map[string]string{"region": "us"}); after <= reportsBefore {
		t.Errorf("us's reports taken: %v before, %v after: the real gateway's reports must still count", reportsBefore, after)
	}
	code, body := call(t, http.MethodGet, hs.URL+balancer.KeyPath+"k:busy", "Bearer", opsToken, nil)
	var ks balancer.KeyShares
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ks) != nil || ks.Limits["s"]["us"].Share != 950_000 || ks.Limits["s"]["eu"].Demand != 0 {
		t.Errorf("k:busy with the operator's token: got %d %s, want us at 950000 and no demand from eu", code, body)
	}
}

// TestBearerSchemeCaseInsensitive checks that the balancer reads the
// Authorization scheme without regard to case (RFC 9110, section 11.1),
// as the rules service does.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	srv, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us"}}, Token: "fleet-token", Tokens: testTokens[:1], MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	tests := []struct {
		auth string
		ok   bool
	}{
		{"Bearer " + usToken, true},
		{"bearer " + usToken, true},
		{"BEARER fleet-token", true},
		{"bEaReR " + usToken, true},
		{"Bearer  " + usToken, true}, // two spaces
		{"Basic " + usToken, false},
		{"Bearer wrong-token-0123456789", false},
		{"bearer ", false},
		{"Bearer" + usToken, false},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodGet, hs.URL+balancer.SharesPath+"?region=us&wait=0s", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", tt.auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.StatusCode != http.StatusUnauthorized; got != tt.ok {
			t.Errorf("Authorization: %q: got %d, want accepted %v", tt.auth, resp.StatusCode, tt.ok)
		}
	}
}

// TestTokensRefused checks New's refusals of credentials that would not
// do what they say.
func TestTokensRefused(t *testing.T) {
	tests := []struct {
		tokens []balancersvc.Token
		want   string
	}{
		{[]balancersvc.Token{{Name: "a", Secret: "short", Region: "us"}}, "want at least 16"},
		{[]balancersvc.Token{{Name: "a", Secret: usToken, Region: "mars"}}, `region "mars" is not one of`},
		{[]balancersvc.Token{{Name: "a", Secret: usToken, Region: "us"}, {Name: "b", Secret: usToken, Region: "eu"}}, "also token a's"},
		{[]balancersvc.Token{{Name: "a", Secret: "fleet-token-0123456789", Region: "us"}}, "also the fleet token's"},
		{[]balancersvc.Token{{Name: "a", Secret: usToken, Gateway: "us-1"}}, "without a region"},
		{[]balancersvc.Token{{Name: "", Secret: usToken, Region: "us"}}, "name"},
	}
	for _, tt := range tests {
		_, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us", "eu"}}, Token: "fleet-token-0123456789", Tokens: tt.tokens})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("tokens %+v: got error %v, want one containing %q", tt.tokens, err, tt.want)
		}
	}
}

// floodReport is one forged report of n pairs of distinct keys of keyLen
// bytes, as internal/balancer's flood tests make them.
func floodReport(gateway string, n, keyLen int) balancer.Report {
	rep := balancer.Report{Region: "us", Gateway: gateway, SpanMillis: 10_000, Total: 2e6, Pairs: make([]balancer.PairReport, n)}
	prefix := "k:" + gateway + strings.Repeat("x", keyLen-2-len(gateway)-7)
	for i := range n {
		rep.Pairs[i] = balancer.PairReport{Key: fmt.Sprintf("%s%07d", prefix, i), Limit: "s", Asked: int64(1 + i%1000)}
	}
	return rep
}

// TestServerStateMetrics checks, on a server fed more than its bound, the
// state bound's metrics (the state in bytes, the pairs evicted) and the
// clamp's (a report above the gateway rate is taken cut, counted and
// logged).
func TestServerStateMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var log proctest.Buffer
	srv, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us"}, MaxStateBytes: 1 << 20}, Tokens: testTokens[:1], Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for g := range 3 {
		if code, body := call(t, http.MethodPost, hs.URL+balancer.ReportPath, "Bearer", usToken, floodReport(fmt.Sprint("g", g), 2000, 250)); code != http.StatusNoContent {
			t.Fatalf("report %d: got %d %s, want 204", g, code, body)
		}
		if got := counter(t, reg, "sluice_balancer_state_bytes", nil); got > 1<<20 || got == 0 {
			t.Errorf("after report %d: sluice_balancer_state_bytes %v, want within (0, %d]", g, got, 1<<20)
		}
	}
	if got := counter(t, reg, "sluice_balancer_pairs_evicted_total", nil); got == 0 {
		t.Error("sluice_balancer_pairs_evicted_total is 0 after 2 MB of reports against a 1 MB bound")
	}
	huge := balancer.Report{Region: "us", Gateway: "g9", SpanMillis: 1000, Total: 1e15}
	if code, body := call(t, http.MethodPost, hs.URL+balancer.ReportPath, "Bearer", usToken, huge); code != http.StatusNoContent {
		t.Fatalf("a report of 10^15 tokens a second: got %d %s, want 204 (taken, cut)", code, body)
	}
	if got := counter(t, reg, "sluice_balancer_reports_clamped_total", map[string]string{"region": "us", "reason": balancer.ReasonRate}); got != 1 {
		t.Errorf("sluice_balancer_reports_clamped_total{reason=rate}: got %v, want 1", got)
	}
	for _, want := range []string{`"msg":"balancer report clamped to what one gateway can have seen"`, `"msg":"balancer state at its bound`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the balancer's log lacks %s:\n%s", want, log.String())
		}
	}
}
