package rules_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

func mustLoad(t testing.TB) *rules.Set {
	t.Helper()
	s, err := rules.LoadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResolvePrecedence(t *testing.T) {
	s := mustLoad(t)
	before := time.Date(2026, 10, 28, 8, 0, 0, 0, time.UTC) // the key_8f3 override still applies
	after := time.Date(2026, 10, 28, 9, 0, 0, 0, time.UTC)  // it has expired
	type lim struct {
		name         string
		count, burst int64
		per          time.Duration
	}
	tests := []struct {
		name     string
		now      time.Time
		q        rules.Query
		want     []lim
		cost     int64
		closed   string // the limit that fails closed, if any
		wantPlan string
	}{
		{"unknown key gets the default", after, rules.Query{APIKey: "nobody"},
			[]lim{{"s", 10, 20, time.Second}}, 1, "", ""},
		{"a plan without rules of its own gets the default", after, rules.Query{APIKey: "key_free"},
			[]lim{{"s", 10, 20, time.Second}}, 1, "", "free"},
		{"pro plan", after, rules.Query{APIKey: "key_8f3"},
			[]lim{{"s", 100, 200, time.Second}, {"m", 5000, 5000, time.Minute}}, 1, "", "pro"},
		{"pro plan on search adds the search limit and its cost", after, rules.Query{APIKey: "key_8f3", Endpoint: "search"},
			[]lim{{"s", 100, 200, time.Second}, {"m", 5000, 5000, time.Minute}, {"search", 20, 40, time.Second}}, 5, "", "pro"},
		{"key override wins s until it expires", before, rules.Query{APIKey: "key_8f3"},
			[]lim{{"s", 10, 10, time.Second}, {"m", 5000, 5000, time.Minute}}, 1, "", "pro"},
		{"no key: the ip rule stands in for the default", after, rules.Query{},
			[]lim{{"ip", 50, 100, time.Second}}, 1, "", ""},
		{"login adds a fail-closed limit for everyone", after, rules.Query{Endpoint: "login"},
			[]lim{{"ip", 50, 100, time.Second}, {"login", 5, 5, time.Minute}}, 1, "login", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Resolve(tt.now, tt.q)
			if len(res.Limits) != len(tt.want) {
				t.Fatalf("got %d limits (%v), want %d", len(res.Limits), res.Limits, len(tt.want))
			}
			for i, w := range tt.want {
				g := res.Limits[i]
				if g.Name != w.name || g.Count != w.count || g.EffectiveBurst() != w.burst || g.Period != w.per {
					t.Errorf("limit %d: got %v, want %s %d per %v burst %d", i, g, w.name, w.count, w.per, w.burst)
				}
				if g.FailClosed != (g.Name == tt.closed) {
					t.Errorf("limit %s: fail closed %v, want %v", g.Name, g.FailClosed, g.Name == tt.closed)
				}
				if res.Rules[i] == nil {
					t.Errorf("limit %s: no rule recorded", g.Name)
				}
			}
			if res.Cost != tt.cost {
				t.Errorf("cost %d, want %d", res.Cost, tt.cost)
			}
			if res.Plan != tt.wantPlan {
				t.Errorf("plan %q, want %q", res.Plan, tt.wantPlan)
			}
		})
	}
}

func TestShadowRulesNeverEnforced(t *testing.T) {
	s, err := rules.Parse("inline", []byte(`
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1s}]
  - scope: default
    mode: shadow
    limits: [{name: s, rate: 2, per: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	res := s.Resolve(time.Now(), rules.Query{APIKey: "k"})
	if len(res.Limits) != 1 || res.Limits[0].Count != 10 {
		t.Errorf("enforced limits %v, want only s=10/s", res.Limits)
	}
	if len(res.Shadow) != 1 || res.Shadow[0].Count != 2 || res.ShadowRules[0].Mode != rules.Shadow {
		t.Errorf("shadow limits %v, want s=2/s from the shadow rule", res.Shadow)
	}
}

func TestEndpointMatching(t *testing.T) {
	s, err := rules.Parse("inline", []byte(`
endpoints:
  - {name: any, path: /v1/*}
  - {name: search, method: GET, path: /v1/search, cost: 5}
  - {name: items, path: /v1/items/*}
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ method, path, want string }{
		{"GET", "/v1/search", "search"},
		{"POST", "/v1/search", "any"},
		{"GET", "/v1/items/42", "items"},
		{"GET", "/v1/other", "any"},
		{"GET", "/v2/search", ""},
		// Spellings of one path that servers route alike, and HEAD for GET.
		{"HEAD", "/v1/search", "search"},
		{"GET", "/v1//search", "search"},
		{"GET", "/v1/search/", "search"},
		{"GET", "/v1/./search", "search"},
		{"GET", "/v1/x/../search", "search"},
		{"GET", "v1/search", "search"},
		{"GET", "/v1/items", "items"},
		{"GET", "/v1/items/", "items"},
		{"GET", "/v1/itemsx", "any"},
		{"DELETE", "/v1/items/1", "items"},
	}
	for _, tt := range tests {
		ep, _ := s.Endpoint(tt.method, tt.path)
		if ep.Name != tt.want {
			t.Errorf("%s %s: endpoint %q, want %q", tt.method, tt.path, ep.Name, tt.want)
		}
	}
}

// An endpoint of one method wins over one of any method on the same path,
// wherever each stands in the file.
func TestEndpointMethodBeforeAny(t *testing.T) {
	for _, order := range []string{"any first", "method first"} {
		eps := "  - {name: any, path: /v1/login}\n  - {name: login, method: POST, path: /v1/login}\n"
		if order == "method first" {
			eps = "  - {name: login, method: POST, path: /v1/login}\n  - {name: any, path: /v1/login}\n"
		}
		s, err := rules.Parse("inline", []byte("endpoints:\n"+eps+"rules:\n  - scope: default\n    limits: [{name: s, rate: 1, per: 1s}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if ep, _ := s.Endpoint("POST", "/v1/login"); ep.Name != "login" {
			t.Errorf("%s: POST /v1/login matched %q, want login", order, ep.Name)
		}
		if ep, _ := s.Endpoint("GET", "/v1/login"); ep.Name != "any" {
			t.Errorf("%s: GET /v1/login matched %q, want any", order, ep.Name)
		}
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // all must appear in the error
	}{
		{"negative rate", `
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: -1, per: 1s}]`, []string{"bad.yaml", "rules[0] (plan plan=pro)", "limits[0]", "rate -1"}},
		{"bad period", `
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: fortnight}]`, []string{"bad.yaml", "line 4", "period \"fortnight\""}},
		{"empty file", "  \n", []string{"bad.yaml", "empty"}},
		{"no rules", "keys: {k: {plan: p}}", []string{"bad.yaml", "at least one rule"}},
		{"unknown scope", `
rules:
  - scope: galaxy
    limits: [{name: s, rate: 1, per: 1s}]`, []string{"rules[0]", "scope", "galaxy"}},
		{"unknown field", `
rules:
  - scope: default
    limit: [{name: s, rate: 1, per: 1s}]`, []string{"bad.yaml", "limit"}},
		{"undeclared endpoint", `
rules:
  - scope: endpoint
    match: {endpoint: login}
    limits: [{name: s, rate: 1, per: 1s}]`, []string{"rules[0]", "match.endpoint", "login"}},
		{"bad fail mode", `
rules:
  - scope: default
    fail_mode: sideways
    limits: [{name: s, rate: 1, per: 1s}]`, []string{"fail_mode", "sideways"}},
		{"duplicate rule", `
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1s}]
  - scope: default
    limits: [{name: t, rate: 1, per: 1s}]`, []string{"rules[1]", "match", "already exists"}},
		{"limit named twice", `
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1s}, {name: s, rate: 5, per: 1m}]`, []string{"limits[1].name", "twice"}},
		{"two permanent ip rules", `
rules:
  - scope: ip
    limits: [{name: ip, rate: 1, per: 1s}]
  - scope: ip
    limits: [{name: ip, rate: 5, per: 1s}]`, []string{"rules[1] (ip)", "match", "already exists"}},
		{"no limits", `
rules:
  - scope: default
    limits: []`, []string{"limits", "at least one"}},
		{"key rule without key", `
rules:
  - scope: key
    limits: [{name: s, rate: 1, per: 1s}]`, []string{"match", "one key"}},
		{"plan of a key missing", `
keys:
  k1: {org: acme}
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1s}]`, []string{`keys["k1"]`, "plan"}},
		{"name with a brace", `
rules:
  - scope: default
    limits: [{name: "a}", rate: 1, per: 1s}]`, []string{"limits[0]", "braces"}},
		{"sub-millisecond period", `
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1500us}]`, []string{"whole number of milliseconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse("bad.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("parsed without error, want one")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestFieldErrorIsTyped(t *testing.T) {
	_, err := rules.Compile(rules.Document{Rules: []rules.Rule{{Scope: rules.ScopeDefault}}}, 1)
	var fe *rules.FieldError
	if !errors.As(err, &fe) || fe.Field != "limits" {
		t.Fatalf("got %v, want a *FieldError on limits", err)
	}
}

func TestHashIsStable(t *testing.T) {
	a, b := mustLoad(t), mustLoad(t)
	if a.Hash != b.Hash || len(a.Hash) != 64 {
		t.Errorf("hashes %q and %q, want equal 64-hex-digit hashes", a.Hash, b.Hash)
	}
	doc := a.Document()
	doc.Rules = doc.Rules[:len(doc.Rules)-1]
	c, err := rules.Compile(doc, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash == a.Hash {
		t.Error("a different rule set has the same hash")
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"1s", time.Second, "1s"}, {"1m", time.Minute, "1m"}, {"90s", 90 * time.Second, "90s"},
		{"1h", time.Hour, "1h"}, {"1d", 24 * time.Hour, "1d"}, {"250ms", 250 * time.Millisecond, "250ms"},
	}
	for _, tt := range tests {
		d, err := rules.ParseDuration(tt.in)
		if err != nil || time.Duration(d) != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, time.Duration(d), err, tt.want)
		}
		if d.String() != tt.out {
			t.Errorf("%v.String() = %q, want %q", tt.want, d.String(), tt.out)
		}
	}
	for _, bad := range []string{"", "d", "0d", "-1d", "1x", "400d"} {
		if _, err := rules.ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded, want an error", bad)
		}
	}
}

// TestResolveCached: keys on one plan share one cached resolution, and a
// key with rules of its own, or an expiring override, still gets its own
// answer at every time.
func TestResolveCached(t *testing.T) {
	set, err := rules.Parse("cache.yaml", []byte(`
keys:
  a: {plan: pro}
  b: {plan: pro}
  c: {plan: pro}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 100, per: 1s}]
  - scope: key
    match: {key: c}
    limits: [{name: s, rate: 5, per: 1s}]
    expires_at: 2030-01-01T00:00:00Z
`))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Date(2029, 12, 31, 23, 59, 59, 0, time.UTC)
	after := before.Add(2 * time.Second)
	ra := set.Resolve(before, rules.Query{APIKey: "a"})
	rb := set.Resolve(before, rules.Query{APIKey: "b", LookedUp: true, Info: rules.KeyInfo{Plan: "pro"}, Known: true})
	if &ra.Limits[0] != &rb.Limits[0] {
		t.Error("two keys of one plan got separate resolutions: the cache is not shared")
	}
	for _, tc := range []struct {
		at   time.Time
		key  string
		want int64
	}{
		{before, "c", 5}, {after, "c", 100}, {before, "c", 5}, {after, "a", 100}, {before, "a", 100},
	} {
		if got := set.Resolve(tc.at, rules.Query{APIKey: tc.key}).Limits[0].Count; got != tc.want {
			t.Errorf("key %s at %v: rate %d, want %d", tc.key, tc.at, got, tc.want)
		}
	}
}

// A rate is what users write: decimal rates are read exactly, as the same
// rate in whole tokens over a longer period, and every numeric field that
// cannot be read exactly is refused with the value as written and what to
// write instead.
func TestNumbersAreReadAsWritten(t *testing.T) {
	tests := []struct {
		limit      string
		wantCount  int64
		wantPeriod time.Duration
		wantBurst  int64
		wantErr    []string // substrings of the error; nil for none
	}{
		{limit: "{name: s, rate: 100, per: 1s}", wantCount: 100, wantPeriod: time.Second},
		{limit: "{name: s, rate: 0.5, per: 1s}", wantCount: 1, wantPeriod: 2 * time.Second},
		{limit: "{name: s, rate: 1.5, per: 1s}", wantCount: 3, wantPeriod: 2 * time.Second},
		{limit: "{name: s, rate: 1.5, per: 1s, burst: 5}", wantCount: 3, wantPeriod: 2 * time.Second, wantBurst: 5},
		{limit: "{name: s, rate: 0.25, per: 1m}", wantCount: 1, wantPeriod: 4 * time.Minute},
		{limit: "{name: s, rate: 2.50, per: 1s, algorithm: gcra}", wantCount: 5, wantPeriod: 2 * time.Second},
		{limit: "{name: s, rate: 2.0, per: 1s}", wantCount: 2, wantPeriod: time.Second},
		{limit: "{name: s, rate: 1e3, per: 1s}", wantErr: []string{"line 4", "rate 1e3", "write 1000, not 1e3"}},
		{limit: "{name: s, rate: 0x10, per: 1s}", wantErr: []string{"rate 0x10", "write 16"}},
		{limit: "{name: s, rate: 1_000, per: 1s}", wantErr: []string{"rate 1_000", "write 1000"}},
		{limit: `{name: s, rate: "5", per: 1s}`, wantErr: []string{"line 4", "rate must be a number"}},
		{limit: "{name: s, rate: 0.0000001, per: 1s}", wantErr: []string{"rate 0.0000001 has more than 6 decimal places"}},
		{limit: "{name: s, rate: 0, per: 1s}", wantErr: []string{"limits[0]", "rate 0 must be positive"}},
		{limit: "{name: s, rate: -1.5, per: 1s}", wantErr: []string{"limits[0]", "rate -1.5 must be positive"}},
		{limit: "{name: s, rate: 0.5, per: 1s, algorithm: fixed_window}",
			wantErr: []string{"limits[0]", "rate 0.5 per 1s", "write rate: 1, per: 2s"}},
		{limit: "{name: s, rate: 0.001, per: 1d}", wantErr: []string{"rate 0.001 per 1d", "longer than 366 days"}},
		{limit: "{name: s, rate: 10, per: 1s, burst: 1.5}", wantErr: []string{"line 4", "1.5 is not a whole number of tokens: write 1 or 2"}},
		{limit: "{name: s, rate: 10, per: 1s, burst: 20.0}", wantErr: []string{"20.0 is not a whole number of tokens: write 20"}},
		{limit: "{name: s, rate: 10, per: 1s, burst: 2e1}", wantErr: []string{"2e1 is not a whole number of tokens", "write 20"}},
	}
	for _, tt := range tests {
		doc := "rules:\n  - scope: default\n    limits:\n      - " + tt.limit + "\n"
		s, err := rules.Parse("rates.yaml", []byte(doc))
		if tt.wantErr != nil {
			if err == nil {
				t.Errorf("%s: accepted, want an error mentioning %q", tt.limit, tt.wantErr)
				continue
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not mention %q", tt.limit, err, w)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.limit, err)
			continue
		}
		l := s.Resolve(time.Now(), rules.Query{APIKey: "k"}).Limits[0]
		if l.Count != tt.wantCount || l.Period != tt.wantPeriod || l.Burst != tt.wantBurst {
			t.Errorf("%s: got %d per %v burst %d, want %d per %v burst %d",
				tt.limit, l.Count, l.Period, l.Burst, tt.wantCount, tt.wantPeriod, tt.wantBurst)
		}
	}
	// An endpoint's cost is a whole number of tokens too.
	_, err := rules.Parse("cost.yaml", []byte("endpoints: [{name: e, path: /e, cost: 2.5}]\nrules:\n  - scope: default\n    limits: [{name: s, rate: 1, per: 1s}]\n"))
	if err == nil || !strings.Contains(err.Error(), "2.5 is not a whole number of tokens: write 2 or 3") {
		t.Errorf("cost 2.5: got %v, want it refused with what to write", err)
	}
}

// The JSON form, as the admin API and snapshots carry it, reads numbers
// exactly as the YAML form does, and writes a decimal rate back as written.
func TestNumbersInJSON(t *testing.T) {
	var l rules.Limit
	if err := json.Unmarshal([]byte(`{"name":"s","rate":1.5,"per":"1s"}`), &l); err != nil {
		t.Fatal(err)
	}
	if l.Rate != 1.5 {
		t.Errorf("rate 1.5: got %v", l.Rate)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"s","rate":1.5,"per":"1s"}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"name":"s","rate":1e3,"per":"1s"}`, "write 1000, not 1e3"},
		{`{"name":"s","rate":9007199254740993,"per":"1s"}`, "larger than 2^53"},
		{`{"name":"s","rate":10,"per":"1s","burst":1.5}`, "1.5 is not a whole number of tokens: write 1 or 2"},
	} {
		var l rules.Limit
		if err := json.Unmarshal([]byte(tt.body), &l); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tt.body, err, tt.want)
		}
	}
}

// Every spelling of a path that common servers route to a declared
// endpoint's handler reaches that endpoint, or is refused with
// ErrPathSpelling; none slips past.
func TestEndpointSpellingsCannotSlipPast(t *testing.T) {
	s, err := rules.Parse("inline", []byte(`
endpoints:
  - {name: login, method: POST, path: /v1/login}
  - {name: search, path: /v1/search, cost: 5}
  - {name: files, path: /v1/Files/*, case_sensitive: true}
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target  string // the request target as sent on the wire
		want    string // endpoint
		problem string // substring of the PathError; empty for none
	}{
		{"/v1/login", "login", ""},
		{"/V1/login", "login", ""},
		{"/v1/Login", "login", ""},
		{"/V1/LOGIN/", "login", ""},
		{"/v1/login;x=1", "login", ""},
		{"/v1;a=b/login;jsessionid=1", "login", ""},
		{"/v1/login%20", "login", "ends in a dot or a space"},
		{"/v1/login.", "login", "ends in a dot or a space"},
		{"/v1/login..", "login", "ends in a dot or a space"},
		{"/v1/login.%20.", "login", "ends in a dot or a space"},
		{`/v1\login`, "login", "backslash"},
		{"/v1%5Clogin", "login", "backslash"},
		{"/v1/login%252e", "login", "escape (%2e)"},
		{"/v1/%256cogin", "login", "escape (%6c)"},
		{"/v1/login%09", "login", "control character 0x09"},
		{"/v1/login%00", "login", "control character 0x00"},
		{"/v1/login%2500", "login", "escape (%00)"},
		// A case-sensitive endpoint matches its own case only.
		{"/v1/Files/a", "files", ""},
		{"/v1/files/a", "", ""},
		// Paths of no endpoint pass whatever their spelling.
		{"/static/app.", "", ""},
		{`/static\app`, "", ""},
		{"/v1/logins", "", ""},
		{"/v1/login/x", "", ""},
	}
	for _, tt := range tests {
		u, err := url.ParseRequestURI(tt.target)
		if err != nil {
			t.Fatalf("%s: %v", tt.target, err)
		}
		// The gateway sees the path as net/http decoded it.
		ep, ok, err := s.MatchEndpoint("POST", u.Path)
		if ep.Name != tt.want || ok != (tt.want != "") {
			t.Errorf("%s (path %q): endpoint %q, want %q", tt.target, u.Path, ep.Name, tt.want)
		}
		var pe *rules.PathError
		switch {
		case tt.problem == "" && err != nil:
			t.Errorf("%s: got error %v, want none", tt.target, err)
		case tt.problem != "" && !errors.As(err, &pe):
			t.Errorf("%s: got error %v, want a *PathError", tt.target, err)
		case tt.problem != "":
			if !errors.Is(err, rules.ErrPathSpelling) || !strings.Contains(err.Error(), tt.problem) ||
				pe.Endpoint != "login" || pe.Canonical != "/v1/login" {
				t.Errorf("%s: got %#v (%v), want endpoint login, canonical /v1/login, problem %q", tt.target, pe, err, tt.problem)
			}
		}
		// Endpoint agrees, without the error.
		if ep2, _ := s.Endpoint("POST", u.Path); ep2.Name != tt.want {
			t.Errorf("%s: Endpoint gave %q, MatchEndpoint %q", tt.target, ep2.Name, tt.want)
		}
	}
}

// A declared path that a request could only reach through a spelling
// servers disagree on is refused when the rules are loaded.
func TestEndpointPathsMustBePlain(t *testing.T) {
	for _, p := range []string{"/v1/login.", "/v1/login;x=1", `/v1\login`, "/v1/log%20in", "/v1/login /"} {
		doc := fmt.Sprintf("endpoints: [{name: e, path: %q}]\nrules:\n  - scope: default\n    limits: [{name: s, rate: 1, per: 1s}]\n", p)
		_, err := rules.Parse("paths.yaml", []byte(doc))
		var fe *rules.FieldError
		if !errors.As(err, &fe) || fe.Field != "path" {
			t.Errorf("path %q: got %v, want a field error on path", p, err)
		}
	}
}

// The key directory and key rules hold only keys a request can carry: the
// gateway refuses keys with control characters, so the rules do too.
func TestKeysWithControlCharactersAreRefused(t *testing.T) {
	for _, k := range []string{"key\x00", "key\nx", "k\x7f", strings.Repeat("k", rules.MaxKeyLen+1)} {
		if err := rules.CheckKey(k); err == nil {
			t.Errorf("CheckKey(%q) = nil, want an error", k)
		}
		doc := rules.Document{Keys: map[string]rules.KeyInfo{k: {Plan: "pro"}},
			Rules: []rules.Rule{{Scope: rules.ScopeDefault, Limits: []rules.Limit{{Name: "s", Rate: 1, Per: rules.Duration(time.Second)}}}}}
		if _, err := rules.Compile(doc, 0); err == nil {
			t.Errorf("key directory with %q: compiled, want an error", k)
		}
		doc = rules.Document{Rules: []rules.Rule{{Scope: rules.ScopeKey, Match: rules.Match{Key: k},
			Limits: []rules.Limit{{Name: "s", Rate: 1, Per: rules.Duration(time.Second)}}}}}
		if _, err := rules.Compile(doc, 0); err == nil {
			t.Errorf("key rule for %q: compiled, want an error", k)
		}
	}
	if err := rules.CheckKey("key_pro-01.x"); err != nil {
		t.Errorf("CheckKey(key_pro-01.x) = %v", err)
	}
}

// MatchEndpoint runs on every request: a plain path costs no allocation.
func BenchmarkMatchEndpoint(b *testing.B) {
	s := mustLoad(b)
	for _, p := range []string{"/v1/search", "/V1/Search", "/v1/login."} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.MatchEndpoint("GET", p)
			}
		})
	}
}
