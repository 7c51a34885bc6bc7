package gateway_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/rules"
)

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestProxy(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An upstream with its own idea of the budget, which the client
		// must not see.
		w.Header().Set("X-RateLimit-Remaining", "999")
		w.Header().Set("RateLimit", `"up";r=999`)
		w.Header().Set("X-Upstream", "yes")
		json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "query": r.URL.RawQuery, "xff": r.Header.Get("X-Forwarded-For")})
	}))
	defer upstream.Close()
	set, err := rules.Parse("t.yaml", []byte("rules: [{scope: default, limits: [{name: s, rate: 1, per: 1s, burst: 2}]}]"))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set)})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(lim.Middleware(gateway.NewProxy(mustURL(t, upstream.URL), nil)))
	defer front.Close()

	resp, body := doURL(t, "GET", front.URL+"/a/b?x=1", "X-API-Key", "k", "X-Forwarded-For", "198.51.100.9")
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("status %d X-Upstream %q, want 200 from the upstream", resp.StatusCode, resp.Header.Get("X-Upstream"))
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got["path"] != "/a/b" || got["query"] != "x=1" {
		t.Errorf("upstream saw %s?%s, want /a/b?x=1", got["path"], got["query"])
	}
	if got["xff"] != "198.51.100.9, 127.0.0.1" {
		t.Errorf("upstream saw X-Forwarded-For %q, want the inbound chain and the peer", got["xff"])
	}
	if h := resp.Header.Values("X-RateLimit-Remaining"); len(h) != 1 || h[0] != "1" {
		t.Errorf("X-RateLimit-Remaining %q, want only the gateway's [1]", h)
	}
	if h := resp.Header.Values("RateLimit"); len(h) != 1 || h[0] != `"s";r=1;t=1` {
		t.Errorf("RateLimit %q, want only the gateway's", h)
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	front := httptest.NewServer(gateway.NewProxy(mustURL(t, dead), nil))
	defer front.Close()
	resp, body := doURL(t, "GET", front.URL+"/")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if p := decodeProblem(t, resp, body); p.Detail != "the upstream service could not be reached" {
		t.Errorf("detail %q, want the upstream named as the cause", p.Detail)
	}
	if strings.Contains(body, ln.Addr().String()) {
		t.Errorf("body %q shows the upstream's address", body)
	}
}

func TestHealth(t *testing.T) {
	set, err := rules.Parse("t.yaml", []byte("rules: [{scope: default, limits: [{name: s, rate: 1, per: 1s}]}]"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		src  gateway.RuleSource
		want int
	}{{"rules", gateway.StaticRules(set), 200}, {"no rules yet", gateway.StaticRules(nil), 503}} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(gateway.Health(tt.src))
			defer srv.Close()
			resp, body := doURL(t, "GET", srv.URL)
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want == 200 && !strings.Contains(body, set.Hash) {
				t.Errorf("body %q lacks the rules hash %s", body, set.Hash)
			}
		})
	}
}
