package rulesvc_test

import (
	"bytes"
	"encoding"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/rules"
)

var update = flag.Bool("update", false, "rewrite openapi.json from the operations in openapi_test.go")

// apiOp is one operation of the admin API as the description gives it.
type apiOp struct {
	method, path, summary string
	role                  rulesvc.Role // "" for no token
	query                 []apiParam
	body                  any // the request body's type, as a zero value; nil for none
	status                int
	answer                any // the answer's type, as a zero value
}

type apiParam struct{ name, typ, about string }

type (
	ruleList struct {
		Rules []admin.RuleView `json:"rules"`
	}
	endpointList struct {
		Endpoints []rules.Endpoint `json:"endpoints"`
	}
	auditList struct {
		Entries []admin.AuditEntry `json:"entries"`
	}
	shadowAnswer struct {
		// Since is the window the counts cover, as a Go duration.
		Since string             `json:"since"`
		Rules []admin.ShadowRule `json:"rules"`
	}
	refusedAnswer struct {
		Rules []admin.RefusedRule `json:"rules"`
	}
	decisionBody struct {
		Reason string `json:"reason"`
	}
	// Error is every error answer.
	Error struct {
		Error string `json:"error"`
		Field string `json:"field,omitempty"`
		Rule  int64  `json:"rule,omitempty"`
	}
)

// apiOps are the admin API's operations. openapi.json is written from
// them; the test checks them against the mux and the handlers.
var apiOps = []apiOp{
	{"GET", "/rules", "every stored rule, overrides included, by ID", rulesvc.RoleRead, nil, nil, 200, ruleList{}},
	{"POST", "/rules", "add a rule; the service assigns its ID", rulesvc.RoleWrite, nil, rules.Rule{}, 201, admin.Changed[admin.RuleView]{}},
	{"POST", "/rules/validate", "compile the rule set with the rule added (or, with an id, replaced); saves nothing", rulesvc.RoleRead, nil, rules.Rule{}, 200, admin.Validation{}},
	{"GET", "/rules/{id}", "one rule", rulesvc.RoleRead, nil, nil, 200, admin.RuleView{}},
	{"PUT", "/rules/{id}", "replace a rule", rulesvc.RoleWrite, nil, rules.Rule{}, 200, admin.Changed[admin.RuleView]{}},
	{"DELETE", "/rules/{id}", "delete a rule", rulesvc.RoleWrite, nil, nil, 200, admin.Changed[admin.RuleView]{}},
	{"GET", "/keys/{name}", "an API key's directory entry", rulesvc.RoleRead, nil, nil, 200, rules.KeyInfo{}},
	{"PUT", "/keys/{name}", "set an API key's plan and organisation", rulesvc.RoleWrite, nil, rules.KeyInfo{}, 200, admin.Changed[rules.KeyInfo]{}},
	{"DELETE", "/keys/{name}", "remove an API key from the directory", rulesvc.RoleWrite, nil, nil, 200, admin.Changed[rules.KeyInfo]{}},
	{"GET", "/endpoints", "every endpoint, by name", rulesvc.RoleRead, nil, nil, 200, endpointList{}},
	{"GET", "/endpoints/{name}", "one endpoint", rulesvc.RoleRead, nil, nil, 200, rules.Endpoint{}},
	{"PUT", "/endpoints/{name}", "set an endpoint", rulesvc.RoleWrite, nil, rules.Endpoint{}, 200, admin.Changed[rules.Endpoint]{}},
	{"DELETE", "/endpoints/{name}", "remove an endpoint", rulesvc.RoleWrite, nil, nil, 200, admin.Changed[rules.Endpoint]{}},
	{"GET", "/overrides", "the emergency overrides", rulesvc.RoleRead, nil, nil, 200, ruleList{}},
	{"PUT", "/overrides/{key}", "set an API key's emergency override: every gateway at once, no canary", rulesvc.RoleWrite, nil, admin.Override{}, 200, admin.Changed[admin.RuleView]{}},
	{"DELETE", "/overrides/{key}", "end an API key's emergency override", rulesvc.RoleWrite, nil, nil, 200, admin.Changed[admin.RuleView]{}},
	{"GET", "/audit", "the audit log, newest first", rulesvc.RoleRead, []apiParam{{"limit", "integer", "most entries (default 100, at most 1000)"},
		{"before", "integer", "only entries with a smaller ID, to page on"}}, nil, 200, auditList{}},
	{"GET", "/shadow", "what each shadow rule would have refused, with its top keys", rulesvc.RoleRead,
		[]apiParam{{"since", "string", "the window, as a Go duration (default 24h)"}}, nil, 200, shadowAnswer{}},
	{"GET", "/rollout", "the stable version and the newest rollouts", rulesvc.RoleRead, nil, nil, 200, admin.RolloutStatus{}},
	{"POST", "/rollout/promote", "promote the running canary by hand", rulesvc.RoleWrite, nil, decisionBody{}, 200, admin.Decision{}},
	{"POST", "/rollout/halt", "halt the running canary by hand", rulesvc.RoleWrite, nil, decisionBody{}, 200, admin.Decision{}},
	{"GET", "/fleet", "the gateways that polled within the gateway TTL", rulesvc.RoleRead, nil, nil, 200, admin.Fleet{}},
	{"PUT", "/ruleset", "make a document the whole rule set in one version, answering the differences", rulesvc.RoleWrite,
		[]apiParam{{"dry_run", "boolean", "store nothing; answer the differences"}}, rules.Document{}, 200, admin.Applied{}},
	{"GET", "/explain", "why a key is limited on one request: its plan, every matching rule with its source, the tightest limit, its state and last refusal", rulesvc.RoleRead,
		[]apiParam{{"key", "string", "the API key (required)"}, {"method", "string", "the request's method (default GET)"},
			{"path", "string", "the request's path (required)"}, {"region", "string", "the region whose shares to show, read from the quota balancer"}}, nil, 200, admin.Explanation{}},
	{"GET", "/refused", "the busiest refused keys of each rule version, from the gateways' reports", rulesvc.RoleRead, nil, nil, 200, refusedAnswer{}},
	{"GET", "/openapi.json", "this description", "", nil, nil, 200, nil},
}

// schemaGen writes JSON Schemas of Go types as encoding/json writes them,
// named struct types under components.
type schemaGen struct{ defs map[string]any }

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	textType = reflect.TypeFor[encoding.TextMarshaler]()
)

// defName names a struct type in components: Changed[...admin.RuleView]
// is ChangedRuleView.
func defName(t reflect.Type) string {
	name, arg, ok := strings.Cut(t.Name(), "[")
	if ok {
		arg = strings.TrimSuffix(arg, "]")
		name += arg[strings.LastIndex(arg, ".")+1:]
	}
	return name
}

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType || t.Kind() == reflect.Interface:
		return map[string]any{}
	case t.Kind() != reflect.Struct && t.Implements(textType):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		name := defName(t)
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = nil // against recursion
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	panic("no schema for " + t.String())
}

// object is a struct's schema: its JSON fields, those without omitempty
// or omitzero required, and no others.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props, required := map[string]any{}, []string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			tag := f.Tag.Get("json")
			if !f.IsExported() || tag == "-" {
				continue
			}
			if f.Anonymous && tag == "" {
				walk(f.Type)
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			props[name] = g.schema(f.Type)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
	}
	walk(t)
	slices.Sort(required)
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// openAPIDoc writes the description from apiOps.
func openAPIDoc() map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	errRef := g.schema(reflect.TypeFor[Error]())
	paths := map[string]any{}
	for _, op := range apiOps {
		o := map[string]any{"summary": op.summary, "operationId": strings.ToLower(op.method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "_").Replace(op.path)}
		var params []any
		for _, seg := range strings.Split(op.path, "/") {
			if name, ok := strings.CutPrefix(seg, "{"); ok {
				name = strings.TrimSuffix(name, "}")
				typ := "string"
				if name == "id" {
					typ = "integer"
				}
				params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": typ}})
			}
		}
		for _, q := range op.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "description": q.about, "schema": map[string]any{"type": q.typ}})
		}
		if params != nil {
			o["parameters"] = params
		}
		if op.body != nil {
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(op.body))}}}
		}
		answer := map[string]any{}
		if op.answer != nil {
			answer = g.schema(reflect.TypeOf(op.answer))
		}
		o["responses"] = map[string]any{
			strconv.Itoa(op.status): map[string]any{"description": http.StatusText(op.status), "content": map[string]any{"application/json": map[string]any{"schema": answer}}},
			"default":               map[string]any{"description": "an error: 400 bad input (field names it), 401/403 token, 404, 409 conflict, 413 body too large, 422 rule set does not compile", "content": map[string]any{"application/json": map[string]any{"schema": errRef}}},
		}
		if op.role == "" {
			o["security"] = []any{}
		} else {
			o["description"] = "Needs a bearer token of role " + string(op.role) + " (or write)."
		}
		path := rulesvc.AdminPrefix + op.path
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path].(map[string]any)[strings.ToLower(op.method)] = o
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "sluice rules service admin API", "version": "v1",
			"description": "Rules, emergency overrides, the key directory and endpoints, rollouts, the audit log and the fleet. Every change publishes a snapshot version."},
		"security":   []any{map[string]any{"bearer": []any{}}},
		"paths":      paths,
		"components": map[string]any{"schemas": g.defs, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

// TestOpenAPIFile checks that the embedded description is the one
// apiOps make, served without a token.
func TestOpenAPIFile(t *testing.T) {
	want, err := json.MarshalIndent(openAPIDoc(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("openapi.json is not what apiOps describe: run go test -run TestOpenAPIFile -update ./internal/rulesvc")
	}
}

// validate checks v, a decoded JSON value, against schema, resolving refs
// in doc, and returns the problems.
func validate(doc, schema map[string]any, v any, at string) []string {
	if ref, ok := schema["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		return validate(doc, doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any), v, at)
	}
	typ, _ := schema["type"].(string)
	bad := func(format string, a ...any) []string { return []string{at + ": " + fmt.Sprintf(format, a...)} }
	switch typ {
	case "":
		return nil
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return bad("got %T (%v), want an object", v, v)
		}
		var out []string
		props, _ := schema["properties"].(map[string]any)
		required, _ := schema["required"].([]any)
		for _, r := range required {
			if _, ok := m[r.(string)]; !ok {
				out = append(out, bad("lacks required %q", r)...)
			}
		}
		for k, val := range m {
			if p, ok := props[k]; ok {
				out = append(out, validate(doc, p.(map[string]any), val, at+"."+k)...)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case bool:
				out = append(out, bad("has %q, which the schema does not list", k)...)
			case map[string]any:
				out = append(out, validate(doc, ap, val, at+"["+k+"]")...)
			}
		}
		return out
	case "array":
		a, ok := v.([]any)
		if !ok {
			return bad("got %T (%v), want an array", v, v)
		}
		var out []string
		for i, e := range a {
			out = append(out, validate(doc, schema["items"].(map[string]any), e, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return out
	case "string":
		s, ok := v.(string)
		if !ok {
			return bad("got %T (%v), want a string", v, v)
		}
		if schema["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return bad("%q is not a date-time", s)
			}
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			return bad("got %v, want an integer", v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return bad("got %T (%v), want a number", v, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad("got %T (%v), want a boolean", v, v)
		}
	}
	return nil
}

// TestOpenAPIMatchesHandlers serves the description from a real service,
// checks its routes against the mux's, then calls every operation with
// bodies the schemas describe and checks each answer against its schema:
// first on an empty database, then with rules, keys, endpoints, a canary,
// a gateway and shadow counts.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{MaxOverride: 7 * 24 * time.Hour, Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL

	var doc map[string]any
	if code, raw := call(t, base, "", "GET", "/admin/v1/openapi.json", nil, &doc); code != 200 {
		t.Fatalf("GET openapi.json without a token: got %d %s, want 200", code, raw)
	}
	var described []string
	for path, item := range doc["paths"].(map[string]any) {
		for method := range item.(map[string]any) {
			described = append(described, strings.ToUpper(method)+" "+path)
		}
	}
	served := rulesvc.AdminPatterns(r.svc)
	slices.Sort(described)
	slices.Sort(served)
	if !slices.Equal(described, served) {
		t.Fatalf("routes differ:\ndescribed %q\nserved    %q", described, served)
	}

	opOf := func(method, pattern string) map[string]any {
		item, _ := doc["paths"].(map[string]any)[rulesvc.AdminPrefix+pattern].(map[string]any)
		op, _ := item[strings.ToLower(method)].(map[string]any)
		if op == nil {
			t.Fatalf("%s %s is not described", method, pattern)
		}
		return op
	}
	content := func(m map[string]any) map[string]any {
		return m["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
	}
	exercised := map[string]bool{}
	// do sends body to path (whose route is pattern), checks the body
	// against the request schema and the answer against the response
	// schema of its status, and decodes a 2xx answer into out.
	do := func(method, pattern, path string, body any, wantStatus int, out any) {
		t.Helper()
		op := opOf(method, pattern)
		if body != nil && wantStatus/100 == 2 {
			raw, _ := json.Marshal(body)
			var v any
			json.Unmarshal(raw, &v)
			if errs := validate(doc, content(op["requestBody"].(map[string]any)), v, method+" "+pattern+" request"); errs != nil {
				t.Errorf("%s", strings.Join(errs, "\n"))
			}
		}
		code, raw := call(t, base, writeToken, method, path, body, out)
		if code != wantStatus {
			t.Fatalf("%s %s: got %d %s, want %d", method, path, code, raw, wantStatus)
		}
		resp, ok := op["responses"].(map[string]any)[strconv.Itoa(code)].(map[string]any)
		if !ok {
			resp = op["responses"].(map[string]any)["default"].(map[string]any)
		} else {
			exercised[method+" "+pattern] = true
		}
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v: %s", method, path, err, raw)
		}
		if errs := validate(doc, content(resp), v, fmt.Sprintf("%s %s %d answer", method, path, code)); errs != nil {
			t.Errorf("%s\nanswer: %s", strings.Join(errs, "\n"), raw)
		}
	}
	lim := []rules.Limit{{Name: "s", Rate: 10, Per: rules.Duration(time.Second), Burst: 20, Algorithm: "gcra"}}
	readAll := func() {
		do("GET", "/rules", "/admin/v1/rules", nil, 200, nil)
		do("GET", "/overrides", "/admin/v1/overrides", nil, 200, nil)
		do("GET", "/endpoints", "/admin/v1/endpoints", nil, 200, nil)
		do("GET", "/audit", "/admin/v1/audit?limit=50", nil, 200, nil)
		do("GET", "/shadow", "/admin/v1/shadow?since=1h", nil, 200, nil)
		do("GET", "/rollout", "/admin/v1/rollout", nil, 200, nil)
		do("GET", "/fleet", "/admin/v1/fleet", nil, 200, nil)
		do("GET", "/refused", "/admin/v1/refused", nil, 200, nil)
	}
	readAll() // empty lists

	do("PUT", "/keys/{name}", "/admin/v1/keys/key_pro", rules.KeyInfo{Plan: "pro", Org: "acme"}, 200, nil)
	do("GET", "/keys/{name}", "/admin/v1/keys/key_pro", nil, 200, nil)
	do("PUT", "/endpoints/{name}", "/admin/v1/endpoints/search", rules.Endpoint{Method: "GET", Path: "/v1/search", Cost: 2, CaseSensitive: true}, 200, nil)
	do("GET", "/endpoints/{name}", "/admin/v1/endpoints/search", nil, 200, nil)
	do("POST", "/rules/validate", "/admin/v1/rules/validate", rules.Rule{Scope: rules.ScopeDefault, Limits: lim}, 200, nil)
	var created admin.Changed[admin.RuleView]
	do("POST", "/rules", "/admin/v1/rules", rules.Rule{Scope: rules.ScopeDefault, Limits: lim, Reason: "baseline"}, 201, &created)
	id := fmt.Sprint(created.After.ID)
	var shadow admin.Changed[admin.RuleView]
	do("POST", "/rules", "/admin/v1/rules", rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro", Endpoint: "search"},
		Limits: lim, Mode: rules.Shadow, FailMode: rules.FailClosed, ExpiresAt: time.Now().Add(48 * time.Hour).UTC()}, 201, &shadow)
	do("GET", "/rules/{id}", "/admin/v1/rules/"+id, nil, 200, nil)
	do("PUT", "/rules/{id}", "/admin/v1/rules/"+id, rules.Rule{Scope: rules.ScopeDefault, Limits: lim, Reason: "raised"}, 200, nil)
	do("PUT", "/overrides/{key}", "/admin/v1/overrides/key_noisy", admin.Override{Limits: lim, ExpiresAt: time.Now().Add(time.Hour).UTC(),
		Reason: "incident 41", FailMode: rules.FailOpen}, 200, nil)

	// A gateway polls and reports, shadow counts included.
	var sn rulesapi.Snapshot
	if code, raw := call(t, base, gatewayToken, "GET", rulesapi.SnapshotPath+"?gateway=gw-1&region=eu&wait=1ms", nil, &sn); code != 200 {
		t.Fatalf("poll: got %d %s", code, raw)
	}
	rep := rulesapi.Report{Gateway: "gw-1", Region: "eu", Versions: []rulesapi.VersionReport{{Version: sn.Version, Requests: 10, Refused: 1,
		Shadow: []rulesapi.ShadowReport{{Rule: shadow.After.ID, WouldRefuse: 3, TopKeys: []rulesapi.KeyCount{{Key: keyhash.Of("k:key_pro"), Count: 3}}}}}}}
	if code, raw := call(t, base, gatewayToken, "POST", rulesapi.ReportPath, rep, nil); code/100 != 2 {
		t.Fatalf("report: got %d %s", code, raw)
	}
	readAll()
	do("GET", "/explain", "/admin/v1/explain?key=key_noisy&method=GET&path=/v1/search", nil, 200, nil)

	do("POST", "/rollout/promote", "/admin/v1/rollout/promote", decisionBody{Reason: "looks right"}, 200, nil)
	do("PUT", "/ruleset", "/admin/v1/ruleset?dry_run=true", rules.Document{Rules: []rules.Rule{{Scope: rules.ScopeIP, Limits: lim}}}, 200, nil)
	// rules.Document leaves an empty section out; this one is there.
	do("PUT", "/ruleset", "/admin/v1/ruleset", map[string]any{"keys": map[string]rules.KeyInfo{"key_free": {Plan: "free"}},
		"endpoints": []rules.Endpoint{}, "rules": []rules.Rule{{Scope: rules.ScopeIP, Limits: lim}}}, 200, nil)
	readAll() // a canary with counts
	do("POST", "/rollout/halt", "/admin/v1/rollout/halt", decisionBody{Reason: "refusals up"}, 200, nil)
	do("DELETE", "/overrides/{key}", "/admin/v1/overrides/key_noisy", nil, 200, nil)
	do("PUT", "/endpoints/{name}", "/admin/v1/endpoints/other", rules.Endpoint{Path: "/v1/other/*"}, 200, nil)
	do("DELETE", "/endpoints/{name}", "/admin/v1/endpoints/other", nil, 200, nil)
	do("DELETE", "/keys/{name}", "/admin/v1/keys/key_free", nil, 200, nil)
	var ip admin.Changed[admin.RuleView]
	do("POST", "/rules", "/admin/v1/rules", rules.Rule{Scope: rules.ScopeEndpoint, Match: rules.Match{Endpoint: "search"}, Limits: lim}, 422, nil)
	do("POST", "/rules", "/admin/v1/rules", rules.Rule{Scope: rules.ScopeKey, Match: rules.Match{Key: "key_pro"}, Limits: lim}, 201, &ip)
	do("DELETE", "/rules/{id}", "/admin/v1/rules/"+fmt.Sprint(ip.After.ID), nil, 200, nil)
	readAll()
	// Errors answer the Error schema.
	do("GET", "/rules/{id}", "/admin/v1/rules/999999", nil, 404, nil)
	do("PUT", "/ruleset", "/admin/v1/ruleset", map[string]any{"rules": []any{}, "colour": "red"}, 400, nil)
	do("GET", "/openapi.json", "/admin/v1/openapi.json", nil, 200, nil)

	for _, op := range apiOps {
		if !exercised[op.method+" "+op.path] {
			t.Errorf("%s %s: no call answered %d", op.method, op.path, op.status)
		}
	}
}

// TestOpenAPIRequestsAreClosed checks what additionalProperties: false
// says of each request body: the handler refuses a field the schema does
// not list.
func TestOpenAPIRequestsAreClosed(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	seed(t, base)
	for _, op := range apiOps {
		if op.body == nil {
			continue
		}
		path := strings.NewReplacer("{id}", "1", "{name}", "x", "{key}", "k").Replace(op.path)
		code, raw := call(t, base, writeToken, op.method, rulesvc.AdminPrefix+path, `{"colour": "red"}`, nil)
		if code != 400 || !strings.Contains(raw, `"field":"colour"`) {
			t.Errorf("%s %s with an unknown field: got %d %s, want 400 naming it", op.method, path, code, raw)
		}
	}
}
