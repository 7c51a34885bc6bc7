package quota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/quota"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

func TestWindow(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	tests := []struct {
		name   string
		q      quota.Quota
		at     time.Time
		wantID string
		end    time.Time
	}{
		{"utc day", quota.Quota{Name: "d", Count: 1, Period: quota.Day}, time.Date(2026, 12, 3, 23, 59, 0, 0, time.UTC),
			"2026-12-03", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"berlin month, still november there", quota.Quota{Name: "m", Count: 1, Period: quota.Month, Location: berlin},
			time.Date(2026, 11, 30, 22, 59, 0, 0, time.UTC), "2026-11", time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)},
		{"berlin month, december there", quota.Quota{Name: "m", Count: 1, Period: quota.Month, Location: berlin},
			time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC), "2026-12", time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)},
		{"berlin day across summer time", quota.Quota{Name: "d", Count: 1, Period: quota.Day, Location: berlin},
			time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC), "2026-03-29", time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, _, end := tt.q.Window(tt.at)
			if id != tt.wantID || !end.Equal(tt.end) {
				t.Errorf("got %s ending %v, want %s ending %v", id, end.UTC(), tt.wantID, tt.end)
			}
		})
	}
}

// fleet is n gateways' Counters over one shared Memory, flushed by hand.
type fleet struct {
	shared quota.Memory
	gws    []*quota.Counter
}

func newFleet(n int) *fleet {
	f := &fleet{}
	for range n {
		f.gws = append(f.gws, quota.NewCounter(func() int { return n }))
	}
	return f
}

func (f *fleet) flush(t *testing.T, g int, now time.Time) {
	adds := f.gws[g].Pending(now)
	totals, err := f.shared.AddCounts(context.Background(), adds)
	f.gws[g].Settle(adds, totals, err)
}

// take asks gateway g, reading an unknown counter first as Batcher does.
func (f *fleet) take(t *testing.T, g int, now time.Time, qs []quota.Quota) quota.Decision {
	d := f.gws[g].Take(now, "k:a", qs, 1)
	if d.Unknown {
		f.flush(t, g, now)
		d = f.gws[g].Take(now, "k:a", qs, 1)
	}
	if d.Unknown {
		t.Fatalf("gateway %d: counter still unknown after a read", g)
	}
	return d
}

// TestMonthBoundaryBerlin crosses midnight of 30 November in Berlin on a
// fake clock: the December count starts fresh at 23:00 UTC, not at
// midnight UTC.
func TestMonthBoundaryBerlin(t *testing.T) {
	qs := []quota.Quota{{Name: "m", Count: 5, Period: quota.Month, Location: mustLoad(t, "Europe/Berlin")}}
	f := newFleet(1)
	now := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	for i := range 6 {
		if d := f.take(t, 0, now, qs); d.Allowed != (i < 5) {
			t.Fatalf("November request %d: allowed %v", i, d.Allowed)
		}
		f.flush(t, 0, now)
	}
	if d := f.take(t, 0, time.Date(2026, 11, 30, 22, 59, 59, 0, time.UTC), qs); d.Allowed {
		t.Fatalf("22:59:59 UTC is still November in Berlin: allowed a sixth request")
	}
	dec := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	d := f.take(t, 0, dec, qs)
	if !d.Allowed || d.Remaining != 4 || d.ResetAfter != 31*24*time.Hour {
		t.Fatalf("first of December in Berlin: got %+v, want allowed, 4 left, reset in 31 days", d)
	}
}

// TestOverBound drives three gateways in rounds, each sending k requests
// and flushing in turn (staggered, so each learns the others' counts up to
// an interval late), and checks the fleet passes the quota by no more than
// the package's bound: N-1 + the fleet's admissions in one interval.
func TestOverBound(t *testing.T) {
	for _, tt := range []struct {
		name     string
		count    int64
		perRound int
	}{
		{"quiet", 1000, 1},
		{"busy", 1000, 20},
		{"small quota", 10, 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const n = 3
			qs := []quota.Quota{{Name: "d", Count: tt.count, Period: quota.Day}}
			f := newFleet(n)
			now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
			admitted := int64(0)
			for round := 0; round < 500; round++ {
				for g := range n {
					for range tt.perRound {
						if f.take(t, g, now, qs).Allowed {
							admitted++
						}
					}
					f.flush(t, g, now)
				}
			}
			for g := range n {
				f.flush(t, g, now)
			}
			bound := tt.count + n - 1 + int64(n*tt.perRound)
			t.Logf("quota %d: fleet admitted %d (over by %d; bound %d)", tt.count, admitted, admitted-tt.count, bound-tt.count)
			if admitted > bound || admitted < tt.count {
				t.Errorf("admitted %d, want from %d to %d", admitted, tt.count, bound)
			}
		})
	}
}

// failing is an Adder whose calls fail until up: a Redis outage, injected.
type failing struct {
	up     bool
	shared quota.Memory
}

func (f *failing) AddCounts(ctx context.Context, adds []quota.Add) ([]int64, error) {
	if !f.up {
		return nil, errors.New("connection refused")
	}
	return f.shared.AddCounts(ctx, adds)
}

// TestOutageShare checks a gateway that cannot read a counter: it admits
// its share of the quota (10 of 30 in a fleet of 3), and its counts reach
// the store once it answers.
func TestOutageShare(t *testing.T) {
	a := &failing{}
	b, err := quota.New(a, quota.Config{Interval: time.Hour, Fleet: limit.Fleet{Gateways: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	qs := []quota.Quota{{Name: "d", Count: 30, Period: quota.Day}}
	admitted := 0
	for range 20 {
		d, err := b.Take(t.Context(), "k:a", qs, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("in the outage: admitted %d, want this gateway's share, 10", admitted)
	}
	if err := b.Flush(t.Context()); err == nil {
		t.Fatal("flush in the outage: no error")
	}
	a.up = true
	if err := b.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _ := a.shared.AddCounts(t.Context(), []quota.Add{{Key: "k:a", Counter: counterOf(qs[0])}})
	if got[0] != 10 {
		t.Errorf("after the outage: store holds %d, want the 10 admitted", got[0])
	}
}

func counterOf(q quota.Quota) string {
	id, _, _ := q.Window(time.Now())
	return q.CounterName(id)
}

// TestCounterShadowAndKey counts a shadow quota apart from the enforced
// one of the same name, never refusing with it, and an org's quota under
// its own key across two keys.
func TestCounterShadowAndKey(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	c := quota.NewCounter(nil)
	qs := []quota.Quota{
		{Name: "daily", Count: 10, Period: quota.Day},
		{Name: "org", Count: 4, Period: quota.Day, Key: "o:acme"},
		{Name: "daily", Count: 2, Period: quota.Day, Shadow: true},
	}
	// Every counter starts unknown: settle them at zero, as a read would.
	var adds []quota.Add
	for _, key := range []string{"k:a", "k:b"} {
		if d := c.Take(now, key, qs, 1); !d.Unknown {
			t.Fatalf("first take of %s: %+v, want Unknown", key, d)
		}
		adds = c.Pending(now)
		c.Settle(adds, make([]int64, len(adds)), nil)
	}
	for i, tt := range []struct {
		key           string
		allowed, shad bool
	}{
		{"k:a", true, false}, {"k:a", true, false}, {"k:a", true, true}, // a's shadow 2 used up
		{"k:b", true, false}, {"k:b", false, false}, // the org's 4 used up; refused asks no shadow
	} {
		d := c.Take(now, tt.key, qs, 1)
		if d.Allowed != tt.allowed || d.ShadowRefused != tt.shad || (d.ShadowRefused && d.ShadowIndex != 2) {
			t.Errorf("take %d of %s: %+v, want allowed %v, shadow refused %v", i, tt.key, d, tt.allowed, tt.shad)
		}
	}
	got := map[string]int64{}
	for _, a := range c.Pending(now) {
		got[a.Key+" "+a.Counter] = a.Delta
	}
	want := map[string]int64{
		"k:a daily:day:UTC:2026-12-03": 3, "k:a shadow:daily:day:UTC:2026-12-03": 2,
		"k:b daily:day:UTC:2026-12-03": 1, "k:b shadow:daily:day:UTC:2026-12-03": 1,
		"o:acme org:day:UTC:2026-12-03": 4,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("pending %s: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}
