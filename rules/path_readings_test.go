package rules_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/rules"
)

// TestLargeRateDigits: a rate whose digits, read without the decimal
// point, would overflow is refused, never wrapped into a small rate.
func TestLargeRateDigits(t *testing.T) {
	for _, text := range []string{"18446744073710.000000", "1844674407370956.0000", "9007199254740.9920"} {
		var r rules.Rate
		if err := json.Unmarshal([]byte(text), &r); err == nil {
			t.Errorf("JSON rate %s read as %v, want an error", text, r)
		}
		doc := "rules:\n  - scope: default\n    limits: [{name: s, rate: " + text + ", per: 1s}]\n"
		if _, err := rules.Parse("r.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), text) {
			t.Errorf("YAML rate %s: error %v, want one naming the value", text, err)
		}
	}
}

// TestPathReadings: a path that a strict server and a lenient one route
// differently is counted under the endpoint either reaches, or refused;
// letters that Unicode case folding reads as ASCII ones cannot escape a
// prefix endpoint; escapes nested past reading are refused; methods match
// whatever their case.
func TestPathReadings(t *testing.T) {
	s, err := rules.Parse("r.yaml", []byte(`
endpoints:
  - {name: search, path: /search}
  - {name: searches, path: /search/*}
  - {name: kv, path: /kv/*}
  - {name: export, path: /v1/export/*, cost: 50}
  - {name: login, method: POST, path: /v1/login}
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		want         string // the endpoint, or "400" for a PathError
	}{
		{"GET", "/v1/export/..;/x", "export"},       // Go's ServeMux routes it to /v1/export/
		{"GET", "/v1/export/a/..;/..;/x", "export"}, // likewise
		{"GET", "/v1/export/%2e%2e/x", "400"},       // "%252e%252e" as sent: decoded again, it leaves the endpoint
		{"GET", "/v1/a/.. /export/x", "400"},        // ".. " trimmed is "..": it reaches the endpoint
		{"GET", "/ſearch/x", "400"},
		{"GET", "/\u212Av/x", "400"},
		{"GET", "/SEARCH/x", "searches"},
		{"post", "/v1/login", "login"},
		{"GET", "/%" + strings.Repeat("25", 30000) + "41", "400"}, // nested escapes: refused after a few passes
		{"GET", "/elsewhere", ""},
	} {
		ep, ok, err := s.MatchEndpoint(tc.method, tc.path)
		got := ep.Name
		switch {
		case err != nil:
			if !errors.Is(err, rules.ErrPathSpelling) {
				t.Errorf("%s %.40s: error %v does not match ErrPathSpelling", tc.method, tc.path, err)
			}
			got = "400"
		case !ok:
			got = ""
		}
		if got != tc.want {
			t.Errorf("%s %.40s: got %q (%v), want %q", tc.method, tc.path, got, err, tc.want)
		}
	}
}
