package rls_test

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rls"
)

// step is one request of a scenario and the codes it must get, as answer
// writes them.
type step struct {
	descs []*ratelimitv3.RateLimitDescriptor
	hits  uint32
	want  string
}

func runSteps(t *testing.T, s *server, domain string, steps []step) []*rlsv3.RateLimitResponse {
	t.Helper()
	var out []*rlsv3.RateLimitResponse
	for i, st := range steps {
		resp := s.ask(t, domain, st.hits, st.descs...)
		if got := answer(resp); got != st.want {
			t.Errorf("request %d: got %s, want %s", i, got, st.want)
		}
		out = append(out, resp)
	}
	return out
}

func TestNestedDescriptorsShareCountersAndRefuseAllOrNothing(t *testing.T) {
	// envoyproxy/ratelimit's second example: marketing messages to one
	// number 2 an hour, any message to one number 3 an hour. The number's
	// own counter is shared by requests that carry it with or without the
	// marketing descriptor, and a request the marketing limit refuses
	// takes nothing from it.
	s := serve(t, `
domain: nested
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: hour, requests_per_unit: 3}
`, clusterStore(t))
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	runSteps(t, s, "nested", []step{
		{descs: ds(marketing, number), want: "OK: OK OK"},
		{descs: ds(marketing, number), want: "OK: OK OK"},
		{descs: ds(marketing, number), want: "OVER_LIMIT: OVER_LIMIT OK"}, // takes nothing from number
		{descs: ds(number), want: "OK: OK"},                               // the third of 3
		{descs: ds(number), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("message_type", "marketing", "to_number", "2062222222")), want: "OK: OK"}, // its own counter
		{descs: ds(desc("message_type", "marketing")), want: "OK: OK"},                            // no limit at that level
	})
	resp := s.ask(t, "nested", 0, desc("to_number", "2063333333"))
	st := resp.GetStatuses()[0]
	if st.GetCurrentLimit().GetRequestsPerUnit() != 3 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
		st.GetLimitRemaining() != 2 || st.GetDurationUntilReset().AsDuration() <= 0 {
		t.Errorf("status: got %v, want limit 3 an hour, 2 remaining, a reset time", st)
	}
	hs := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hs[h.GetKey()] = h.GetValue()
	}
	if hs["X-RateLimit-Remaining"] != "2" || hs["X-RateLimit-Limit"] != "3" || !strings.HasPrefix(hs["RateLimit"], `"to_number=2063333333";r=2;t=`) {
		t.Errorf("headers: got %v, want the gateway's rate limit headers for 2 of 3 left", hs)
	}
	if got := (s.counter(t, "sluice_rls_over_limit_total", "nested", "message_type_marketing.to_number")); got != 1 {
		t.Errorf("over_limit of the marketing descriptor: got %v, want 1", got)
	}
	if got := (s.counter(t, "sluice_rls_total_hits_total", "nested", "to_number")); got != 6 {
		t.Errorf("total_hits of to_number: got %v, want 6", got)
	}
}

func ds(d ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return d }

// counter returns the value of counter name for one domain and
// descriptor; zero when it was never counted.
func (s *server) counter(t *testing.T, name, domain, descriptor string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"domain": domain, "descriptor": descriptor}
	for _, mf := range slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() != name }) {
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if maps.Equal(got, want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestWildcardsUnlimitedAndMostSpecificMatch(t *testing.T) {
	s := serve(t, `
domain: wild
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /api/admin/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/public
    rate_limit: {unlimited: true}
  - key: path
    value: /api/banned
    rate_limit: {unit: second, requests_per_unit: 0}
`, clusterStore(t))
	runSteps(t, s, "wild", []step{
		{descs: ds(desc("path", "/api/a")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/a")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("path", "/api/b")), want: "OK: OK"}, // each value counts alone
		{descs: ds(desc("path", "/api/admin/x")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/admin/x")), want: "OK: OK"}, // the longest prefix: 2
		{descs: ds(desc("path", "/api/admin/x")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("path", "/api/public")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/public")), want: "OK: OK"},
		{descs: ds(desc("path", "/other")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/banned"), desc("path", "/api/c")), want: "OVER_LIMIT: OVER_LIMIT OK"},
		{descs: ds(desc("path", "/api/c")), want: "OK: OK"}, // the blocked request took nothing
		{descs: ds(desc("path", "/api/banned"), desc("path", "/api/banned")), want: "OVER_LIMIT: OVER_LIMIT OVER_LIMIT"},
	})
	st := s.ask(t, "wild", 0, desc("path", "/api/public")).GetStatuses()[0]
	if st.GetLimitRemaining() != math.MaxUint32 {
		t.Errorf("unlimited remaining: got %d, want %d", st.GetLimitRemaining(), uint32(math.MaxUint32))
	}
}

// envoyproxy/ratelimit's wildcards: a '*' anywhere in a value matches any
// run of bytes, and share_threshold makes all values a wildcard matches
// share one counter. Neither may load with its limit missing.
func TestWildcardsAnywhereAndSharedThresholds(t *testing.T) {
	s := serve(t, `
domain: glob
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /api/*/action/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: files
    value: files/*/big
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    value: "*"
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1}
`, clusterStore(t))
	runSteps(t, s, "glob", []step{
		{descs: ds(desc("path", "/api/123/action")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/123/action")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("path", "/api/124/action")), want: "OK: OK"}, // each value counts alone
		{descs: ds(desc("path", "/api//action")), want: "OK: OK"},    // '*' matches the empty run
		{descs: ds(desc("path", "/api/1/2/action")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/1/2/action")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("path", "/api/1/action/x")), want: "OK: OK"}, // the more literal pattern: 2
		{descs: ds(desc("path", "/api/1/action/x")), want: "OK: OK"},
		{descs: ds(desc("path", "/api/1/action/x")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("path", "/api/1/actions")), want: "OK: OK"}, // matches neither
		{descs: ds(desc("path", "/api/1/actions")), want: "OK: OK"},
		// Shared: every value under files/* takes from one counter of 2.
		{descs: ds(desc("files", "files/a")), want: "OK: OK"},
		{descs: ds(desc("files", "files/b")), want: "OK: OK"},
		{descs: ds(desc("files", "files/c")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("files", "files/*")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("files", "files/x/big")), want: "OK: OK"}, // its own pattern, not shared
		{descs: ds(desc("files", "files/y/big")), want: "OK: OK"},
		// Shared at the first level only: each user counts alone, across tenants.
		{descs: ds(desc("tenant", "t1", "user", "u")), want: "OK: OK"},
		{descs: ds(desc("tenant", "t2", "user", "u")), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("tenant", "t2", "user", "v")), want: "OK: OK"},
	})
	for _, name := range []string{"path_/api/*/action", "files_files/*", "tenant_*.user"} {
		if got := s.counter(t, "sluice_rls_total_hits_total", "glob", name); got == 0 {
			t.Errorf("total_hits for %s: got 0, want hits", name)
		}
	}
}

func TestReplaces(t *testing.T) {
	// envoyproxy/ratelimit's seventh example.
	s := serve(t, `
domain: replaces
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 1, unit: hour}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 2
          unit: hour
`, clusterStore(t))
	one, two := desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")
	resps := runSteps(t, s, "replaces", []step{
		{descs: ds(one, two), want: "OK: OK OK"},
		{descs: ds(one, two), want: "OK: OK OK"},
		{descs: ds(one, two), want: "OVER_LIMIT: OK OVER_LIMIT"},
		{descs: ds(one), want: "OK: OK"}, // untouched while replaced
		{descs: ds(one), want: "OVER_LIMIT: OVER_LIMIT"},
	})
	if l := resps[0].GetStatuses()[0].GetCurrentLimit(); l != nil {
		t.Errorf("replaced descriptor's limit: got %v, want none", l)
	}
}

func TestShadowModeNeverRefuses(t *testing.T) {
	// envoyproxy/ratelimit's sixth example.
	s := serve(t, `
domain: shadow
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {requests_per_unit: 1, unit: hour}
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 1, unit: hour}
`, clusterStore(t))
	a, b := desc("service", "auth", "user", "user-a"), desc("service", "auth", "user", "user-b")
	runSteps(t, s, "shadow", []step{
		{descs: ds(a, b), want: "OK: OK OK"},
		{descs: ds(a), want: "OK: OK"},
		{descs: ds(a), want: "OK: OK"},
		{descs: ds(a, b), want: "OVER_LIMIT: OK OVER_LIMIT"},
	})
	if got := (s.counter(t, "sluice_rls_shadow_mode_total", "shadow", "service.user_user-a")); got != 3 {
		t.Errorf("shadow_mode: got %v, want 3", got)
	}
}

func TestHitsAddendOverBurstIsRefusedAndTakesNothing(t *testing.T) {
	s := serve(t, `
domain: cost
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 5}
  - key: region
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: gcra}
`, clusterStore(t))
	resps := runSteps(t, s, "cost", []step{
		{descs: ds(desc("tenant", "t1"), desc("region", "eu")), hits: 6, want: "OVER_LIMIT: OVER_LIMIT OK"},
		{descs: ds(desc("tenant", "t1"), desc("region", "eu")), hits: 5, want: "OK: OK OK"},
	})
	if body := string(resps[0].GetRawBody()); !strings.Contains(body, "costs 6 hits, more than the 5") {
		t.Errorf("refusal body: got %q, want it to say the cost exceeds the burst", body)
	}
	if got := resps[1].GetStatuses()[0].GetLimitRemaining(); got != 0 {
		t.Errorf("tenant remaining after 5 hits: got %d, want 0", got)
	}
	if got := resps[1].GetStatuses()[1].GetCurrentLimit().GetRequestsPerUnit(); got != 100 {
		t.Errorf("region limit: got %d, want 100", got)
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	s := serve(t, "domain: bad\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n", clusterStore(t))
	many := make([]*ratelimitv3.RateLimitDescriptor, 10000)
	for i := range many {
		many[i] = desc("k", "v")
	}
	long := make([]string, 0, 40)
	for range 20 {
		long = append(long, "k", "v")
	}
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: ds(desc("k", "v"))}, "domain is empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "bad"}, "no descriptors"},
		{"10000 descriptors", &rlsv3.RateLimitRequest{Domain: "bad", Descriptors: many}, "10000 descriptors, more than 64"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "bad", Descriptors: ds(desc())}, "descriptor 0 has no entries"},
		{"20 entries", &rlsv3.RateLimitRequest{Domain: "bad", Descriptors: ds(desc(long...))}, "20 entries, more than 16"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "bad", Descriptors: ds(desc("", "v"))}, "empty key"},
		{"long key", &rlsv3.RateLimitRequest{Domain: "bad", Descriptors: ds(desc(strings.Repeat("k", 1025), "v"))}, "key is 1025 bytes, longer than 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := s.client.ShouldRateLimit(ctx, tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want INVALID_ARGUMENT saying %q", err, tt.want)
			}
		})
	}
	// A message over gRPC's 4 MiB bound is refused by the transport.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bad", Descriptors: ds(desc("k", strings.Repeat("v", 5<<20)))})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("5 MiB request: got %v, want RESOURCE_EXHAUSTED", err)
	}
	// A long value within bounds is limited under a hashed counter name.
	runSteps(t, s, "bad", []step{
		{descs: ds(desc("k", strings.Repeat("x", 1024))), want: "OK: OK"},
		{descs: ds(desc("k", strings.Repeat("x", 1024))), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("k", strings.Repeat("x", 1023)+"y")), want: "OK: OK"},
	})
	// An unknown domain has no limits.
	runSteps(t, s, "unknown", []step{{descs: ds(desc("k", "v")), want: "OK: OK"}})
}

// A descriptor value comes from the client (Envoy's request_headers
// action): however long, it must not turn the request into an error,
// which Envoy's usual failure_mode_deny: false lets through every limit,
// including one the client has already used up.
func TestLongValueIsLimitedNotAnError(t *testing.T) {
	s := serve(t, `
domain: longval
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: generic_key
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
`, clusterStore(t))
	ip := desc("remote_address", "10.0.0.1")
	long := strings.Repeat("u", 1025)
	huge := strings.Repeat("w", 64<<10)
	runSteps(t, s, "longval", []step{
		{descs: ds(ip, desc("generic_key", "api", "user", "u")), want: "OK: OK OK"},
		{descs: ds(ip, desc("generic_key", "api", "user", long)), want: "OVER_LIMIT: OVER_LIMIT OK"},
		{descs: ds(desc("generic_key", "api", "user", long)), want: "OK: OK"},
		{descs: ds(desc("generic_key", "api", "user", long)), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("generic_key", "api", "user", huge)), want: "OK: OK"},
		{descs: ds(desc("generic_key", "api", "user", huge)), want: "OVER_LIMIT: OVER_LIMIT"},
		{descs: ds(desc("generic_key", "api", "user", long[1:]+"v")), want: "OK: OK"},
	})
}

// Two of a route's rate_limits, one with its own hits_addend (say, bytes):
// every descriptor is taken at its own cost, all at once, and a refusal by
// any gives back what the others took. Never an error, which Envoy's usual
// failure_mode_deny: false would let through every limit.
func TestDescriptorsOfDifferentCostsAreEachLimited(t *testing.T) {
	s := serve(t, `
domain: mix
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bytes
    rate_limit: {unit: minute, requests_per_unit: 1000}
`, clusterStore(t))
	bytes := func(v string, n uint64) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: desc("bytes", v).Entries, HitsAddend: wrapperspb.UInt64(n)}
	}
	ip := desc("remote_address", "10.0.0.1")
	resps := runSteps(t, s, "mix", []step{
		// The address's limit refuses: the bytes taken with it are given back.
		{descs: ds(bytes("a", 500), ip), want: "OK: OK OK"},
		{descs: ds(bytes("a", 500), ip), want: "OVER_LIMIT: OK OVER_LIMIT"},
		{descs: ds(bytes("a", 400)), want: "OK: OK"},
		// The bytes refuse: the users' hits are given back.
		{descs: ds(desc("user", "u"), bytes("b", 600), desc("user", "v")), want: "OK: OK OK OK"},
		{descs: ds(desc("user", "u"), bytes("b", 600), desc("user", "v")), want: "OVER_LIMIT: OK OVER_LIMIT OK"},
		{descs: ds(desc("user", "u")), want: "OK: OK"},
		// A cost over what a limit ever holds: the refusal says so.
		{descs: ds(bytes("c", 1001), desc("user", "w")), hits: 2, want: "OVER_LIMIT: OVER_LIMIT OK"},
	})
	if got := resps[2].GetStatuses()[0].GetLimitRemaining(); got != 100 {
		t.Errorf("bytes a remaining after 500 and 400, a refused request between: got %d, want 100", got)
	}
	if got := resps[5].GetStatuses()[0].GetLimitRemaining(); got != 8 {
		t.Errorf("user u remaining after three requests, one refused: got %d, want 8", got)
	}
	if body := string(resps[6].GetRawBody()); !strings.Contains(body, "costs 1001 hits, more than the 1000") {
		t.Errorf("refusal body: got %q, want it to say the cost exceeds the limit", body)
	}
}

func TestMetricNamesFollowEnvoyRatelimit(t *testing.T) {
	s := serve(t, `
domain: m
descriptors:
  - key: to_number
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: hour, requests_per_unit: 10}
`, memstore.New(memstore.Config{}))
	s.ask(t, "m", 2, desc("to_number", "206"), desc("user", "alice"), desc("path", "/api/x"), desc("message_type", "marketing", "to_number", "206"))
	for _, name := range []string{"to_number", "user_alice", "path_/api/*", "message_type_marketing.to_number"} {
		if got := s.counter(t, "sluice_rls_total_hits_total", "m", name); got != 2 {
			t.Errorf("total_hits of %q: got %v, want 2", name, got)
		}
	}
}

func TestGlobalShadowModeAnswersOK(t *testing.T) {
	rules, _, err := rls.ParseRules("test.yaml", []byte("domain: g\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := rls.New(rls.Config{Store: memstore.New(memstore.Config{}), Rules: rules, ShadowMode: true, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "g", Descriptors: ds(desc("k", "v"))}
	for i := range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil || answer(resp) != "OK: OK" {
			t.Fatalf("request %d: got %v, %v; want OK: OK", i, answer(resp), err)
		}
	}
	const want = `# HELP sluice_rls_global_shadow_mode_total Requests answered OK under --shadow-mode that would have been OVER_LIMIT.
# TYPE sluice_rls_global_shadow_mode_total counter
sluice_rls_global_shadow_mode_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_rls_global_shadow_mode_total"); err != nil {
		t.Error(err)
	}
}
