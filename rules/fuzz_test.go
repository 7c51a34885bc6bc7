package rules_test

import (
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// yamlLocated matches the YAML decoder's errors that say where in the file
// the problem is, and those of the rules' own field types (a period, a
// rate, a number of tokens), which name their line.
var yamlLocated = regexp.MustCompile(`yaml: (line \d+|unmarshal errors:\n  line \d+)|^rules file fuzz\.yaml: line \d+: `)

// FuzzParse feeds Parse arbitrary bytes. It must never panic; an error must
// name the file and say where the problem is (a rule and field, a line, or
// the value at fault); and a rule set it accepts must compile again to the
// same hash and resolve only to requests a store accepts.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		"rules: [", "rules: 5", "foo: 1", "- 1", "null", "\t", "rules: {}",
		"rules:\n - scope: default\n   limits: [{name: s, rate: 1, per: xx}]",
		"rules:\n - scope: default\n   limits: [{name: s, rate: x, per: 1s}]",
		"rules:\n - scope: plan\n   match: {plan: pro}\n   limits: [{name: h, rate: 5000, per: 1h, algorithm: sliding_window}]",
		"rules:\n - scope: default\n   limits: [{name: s, rate: 3001, per: 1s, algorithm: gcra}]",
		"rules:\n - scope: default\n   limits: [{name: d, rate: 20000, per: 1d, algorithm: sliding_log}]",
		"rules:\n - scope: default\n   limits: [{name: s, rate: 1, per: 1s}, {name: s, rate: 2, per: 1m}]",
		"keys: {a: {}}\nrules: []",
		"endpoints: [{name: e, path: x}]\nrules: []",
		"rules:\n  - expires_at: 0",
		"rules:\n - scope: default\n   limits: [{name: s, rate: 1.5, per: 1s, burst: 2}]",
		"rules:\n - scope: default\n   limits: [{name: s, rate: 0.5, per: 1s, algorithm: fixed_window}]",
		"rules:\n - scope: default\n   limits: [{name: s, rate: 1e3, per: 1s, burst: 1.5}]",
		"endpoints: [{name: e, path: '/v1/e.', cost: 2.5}]\nrules: []",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := rules.Parse("fuzz.yaml", data)
		if err != nil {
			checkParseError(t, data, err)
			return
		}
		again, err := rules.Compile(s.Document(), 0)
		if err != nil {
			t.Fatalf("Parse accepted %q, but compiling its document again fails: %v", data, err)
		}
		if again.Hash != s.Hash {
			t.Fatalf("Parse %q: hash %s, compiled again %s", data, s.Hash, again.Hash)
		}
		checkResolutions(t, data, s)
	})
}

func checkParseError(t *testing.T, data []byte, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, "rules file fuzz.yaml: ") {
		t.Fatalf("Parse(%q): error %q does not name the file", data, msg)
	}
	var fe *rules.FieldError
	switch {
	case errors.As(err, &fe):
		if fe.Where == "" || fe.Problem == "" {
			t.Fatalf("Parse(%q): field error %#v lacks where it is or what is wrong", data, fe)
		}
	case yamlLocated.MatchString(msg):
	case strings.HasPrefix(msg, "rules file fuzz.yaml: yaml: ") && !strings.Contains(msg, "unmarshal"):
		// A syntax error on the first line: the decoder counts lines from
		// zero and leaves out "line 0", so the missing line means line 1.
	case quotesInput(msg, data):
		// A value the decoder could not convert (a period, a time): the
		// value is named, though not its line, which the decoder drops for
		// errors of TextUnmarshaler and time.Time.
	case errors.Is(err, io.EOF):
		// A file with no YAML document at all: nothing to point at.
	default:
		t.Fatalf("Parse(%q): error %q names no rule, field, line or value", data, msg)
	}
}

// quoted matches a Go-quoted string in an error message.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// quotesInput reports whether msg quotes a non-empty piece of data.
func quotesInput(msg string, data []byte) bool {
	for _, q := range quoted.FindAllString(msg, -1) {
		if v, err := strconv.Unquote(q); err == nil && v != "" && strings.Contains(string(data), v) {
			return true
		}
	}
	return false
}

// checkResolutions resolves requests of every kind the set knows of and
// checks that each would be accepted by a store.
func checkResolutions(t *testing.T, data []byte, s *rules.Set) {
	t.Helper()
	doc := s.Document()
	queries := []rules.Query{{}, {APIKey: "unknown-key"}}
	for k := range doc.Keys {
		queries = append(queries, rules.Query{APIKey: k})
		for _, ep := range doc.Endpoints {
			queries = append(queries, rules.Query{APIKey: k, Endpoint: ep.Name})
		}
	}
	for _, r := range doc.Rules {
		queries = append(queries, rules.Query{APIKey: r.Match.Key, Endpoint: r.Match.Endpoint})
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, q := range queries {
		res := s.Resolve(now, q)
		for _, ls := range [][]limit.Limit{res.Limits, res.Shadow} {
			if len(ls) == 0 {
				continue
			}
			req := limit.Request{Key: "k", Cost: res.Cost, Limits: ls}
			if err := req.Validate(); err != nil {
				t.Fatalf("Parse(%q) accepted, but query %+v resolves to an invalid request: %v", data, q, err)
			}
		}
		if res.Cost < 1 {
			t.Fatalf("Parse(%q): query %+v costs %d, want at least 1", data, q, res.Cost)
		}
	}
}

// FuzzMatchEndpoint feeds MatchEndpoint arbitrary paths. It must never
// panic, and the path a *PathError says to send must reach the same
// endpoint without an error: the advice in a 400 works.
func FuzzMatchEndpoint(f *testing.F) {
	set, err := rules.Parse("paths.yaml", []byte(`
endpoints:
  - {name: login, method: POST, path: /v1/login}
  - {name: files, path: /v1/Files/*, case_sensitive: true}
  - {name: export, path: /v1/export/*}
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1s}]
`))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"/v1/login", "/V1/login;x=1", "/v1/login.", "/v1\\login", "/v1/login%2e", "/v1/%252e%252e/v1/login",
		"/v1/login%zz%2e", "/v1/export/a. /b", "/v1/Files/x%00", "%", "", "..", "/v1/login\x00x"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ep, ok, err := set.MatchEndpoint("POST", p)
		var pe *rules.PathError
		if err == nil {
			return
		}
		if errors.As(err, &pe) && pe.Endpoint == "" {
			// Refused whatever it reaches (escapes nested too deep).
			if !strings.Contains(pe.Problem, "nested") {
				t.Fatalf("MatchEndpoint(%q) = %v: refused without an endpoint, but not for nesting", p, err)
			}
			return
		}
		if !errors.As(err, &pe) || !ok || pe.Endpoint != ep.Name {
			t.Fatalf("MatchEndpoint(%q) = %v, %v, %v: want a *PathError naming the endpoint matched", p, ep.Name, ok, err)
		}
		ep2, ok2, err2 := set.MatchEndpoint("POST", pe.Canonical)
		if err2 != nil || !ok2 || ep2.Name != ep.Name {
			t.Fatalf("MatchEndpoint(%q) says to send %q, which gives %q, %v, %v; want %q without an error",
				p, pe.Canonical, ep2.Name, ok2, err2, ep.Name)
		}
	})
}
