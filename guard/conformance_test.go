package guard_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// A guard over a healthy store is that store: both conformance suites
// pass through it.
func newGuarded(t *testing.T, now func() time.Time) *guard.Store {
	s, err := guard.New(memstore.New(memstore.Config{Now: now}), guard.Config{Now: now, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store { return newGuarded(t, now) })
}

func TestGranterConformance(t *testing.T) {
	limittest.RunGranter(t, func(t *testing.T, now func() time.Time) limit.Granter { return newGuarded(t, now) })
}
