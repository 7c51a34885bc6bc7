package regions

import (
	"slices"
	"testing"
	"time"
)

// TestOrgSplit sends an organization's two keys to three regions, 60/30/10
// of twice the org's limit, one key to us and ap and the other to eu: the
// balancer shares the org's limit (store key o:acme, limit s~org, as the
// gateways report it) in proportion, and the org's keys together never
// pass the global limit while getting most of it.
func TestOrgSplit(t *testing.T) {
	const rate, burst = 100, 20
	w := newWorldDoc(t, time.Minute, nil, `
keys:
  o1: {plan: pro, org: acme}
  o2: {plan: pro, org: acme}
rules:
  - scope: default
    limits: [{name: s, rate: 100000, per: 1s}]
  - scope: org
    match: {org: acme}
    limits: [{name: s, rate: 100, per: 1s, burst: 20}]
`)
	w.limits = map[string][2]string{"acme": {"o:acme", "s~org"}}
	tr := newTraffic()
	stop := make(chan struct{})
	for i, f := range []struct {
		key  string
		part int
	}{{"o1", 60}, {"o2", 30}, {"o1", 10}} {
		tr.flow(stop, func() string { return w.gateways[i].URL }, i, f.key, 2*rate*f.part/100)
	}
	took := w.waitSplit("acme", []float64{0.6, 0.3, 0.1})
	from := time.Now()
	time.Sleep(3 * time.Second)
	close(stop)
	tr.wait()
	hs := append(tr.of("o1"), tr.of("o2")...)
	slices.SortFunc(hs, func(a, b hit) int { return a.sent.Compare(b.sent) })
	got := admitted(hs, -1, from, from.Add(3*time.Second))
	worst := checkGlobal(t, hs, rate, burst, tolerance*rate)
	t.Logf("the org's shares within 0.03 of 60/30/10 after %v, now %v; its keys got %d of %d (%.1f%%) over 3s; at most %.1f above the allowance; answers %v",
		took.Round(10*time.Millisecond), w.shares("acme"), got, 3*rate, 100*float64(got)/(3*rate), worst, statuses(hs))
	if got < 3*rate*8/10 {
		t.Errorf("the org's keys got %d of %d over 3s, want at least 80%% of its limit", got, 3*rate)
	}
}
