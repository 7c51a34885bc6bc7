package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

func TestExplainCommandAgainstGateway(t *testing.T) {
	set, err := rules.Parse("r.yaml", []byte(`
keys: {key_pro: {plan: pro}}
rules:
  - scope: default
    limits: [{name: second, rate: 100, per: 1s}]
  - scope: key
    match: {key: key_pro}
    expires_at: `+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`
    reason: incident 23
    limits: [{name: second, rate: 80, per: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := gateway.Explain(gateway.ExplainConfig{Rules: gateway.StaticRules(set), Store: memstore.New(memstore.Config{}), Source: "r.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(gateway.ExplainPath, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"explain", "key_pro", "--path", "/v1/x", "--gateway", srv.URL}, 0,
			[]string{"plan pro", "override until", "incident 23", "displaced", "in force, tightest", "80/1s"}},
		{[]string{"explain", "key_pro", "--path", "/v1/x", "--gateway", srv.URL, "--json"}, 0, []string{`"reason": "incident 23"`}},
		{[]string{"explain", "key_pro", "--gateway", srv.URL}, 2, nil},
		{[]string{"explain", "key_pro", "--path", "/v1/x", "--gateway", "ftp://x"}, 1, nil},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), tt.args, &out, &errOut); code != tt.code {
			t.Errorf("%v: got exit %d, want %d; stderr %s", tt.args, code, tt.code, errOut.String())
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, out.String())
			}
		}
	}
}
