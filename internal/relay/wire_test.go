package relay

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
)

// TestWireRoundTrip writes a request and a grant for the wire and reads
// them back unchanged.
func TestWireRoundTrip(t *testing.T) {
	req := &limit.Request{Key: "k:acme", Cost: 3, Limits: []limit.Limit{
		{Name: "s", Count: 10, Period: time.Second, Burst: 20, Algorithm: limit.GCRA, FailClosed: true},
		{Name: "m", Count: 100, Period: time.Minute, Shadow: true},
	}}
	tk := takeOf(req, 7)
	got, err := tk.request()
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != req.Key || got.Cost != req.Cost || len(got.Limits) != 2 || got.Limits[0] != req.Limits[0] || got.Limits[1] != req.Limits[1] {
		t.Errorf("got %+v, want %+v", got, req)
	}
	for _, g := range []lease.Grant{
		{Granted: 7, TTL: 900 * time.Millisecond, Decision: limit.Decision{Allowed: true, Remaining: 3, ResetAfter: time.Second, Source: limit.FromLease}},
		{Decision: limit.Decision{Index: 1, RetryAfter: limit.Never, Source: limit.FromRedis,
			Shadow: limit.ShadowVerdict{Checked: true, Index: 1, RetryAfter: 5 * time.Millisecond}}},
	} {
		w := grantOf(g, nil)
		back, err := w.lease()
		if err != nil || back != g {
			t.Errorf("got %+v, %v; want %+v", back, err, g)
		}
	}
	w := grantOf(lease.Grant{}, limit.ErrInvalid)
	if _, err := w.lease(); !errors.Is(err, limit.ErrInvalid) {
		t.Errorf("an invalid take's error reads back as %v, want one matching limit.ErrInvalid", err)
	}
}

// FuzzTakeRequest reads any body as the relay does: no panic, and a take
// it accepts is a valid request within the bounds.
func FuzzTakeRequest(f *testing.F) {
	f.Add([]byte(`{"takes":[{"key":"k","cost":1,"want":5,"limits":[{"name":"s","count":10,"period_ms":1000}]}]}`))
	f.Add([]byte(`{"takes":[{"key":"k","limits":[{"name":"s","count":10,"period_ms":-1}]}]}`))
	f.Add([]byte(`{"takes":[{"key":"","want":-3,"limits":[]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var lr LeaseRequest
		if json.Unmarshal(body, &lr) != nil {
			return
		}
		for i := range lr.Takes {
			req, err := lr.Takes[i].request()
			if err != nil {
				continue
			}
			if verr := req.Validate(); verr != nil || len(req.Key) > MaxKeyBytes || len(req.Limits) > MaxLimits {
				t.Fatalf("accepted take %+v: %v", lr.Takes[i], verr)
			}
		}
	})
}
