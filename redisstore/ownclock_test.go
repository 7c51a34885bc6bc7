package redisstore_test

import (
	"testing"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestConformanceOwnClock runs the suite on Redis's own clock, as in
// production: the script reads the time from a bucket's expiry or from
// TIME, creates buckets with SET NX GET, and keeps its one-bucket cache,
// none of which a test clock reaches.
func TestConformanceOwnClock(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			limittest.RunOwnClock(t, func(t *testing.T) limit.Store {
				return newStore(t, redisstore.Config{Addrs: tg.addrs()})
			})
		})
	}
	t.Run("Standalone/scripts", func(t *testing.T) {
		limittest.RunOwnClock(t, func(t *testing.T) limit.Store {
			s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
			redisstore.UseScripts(s)
			return s
		})
	})
}
