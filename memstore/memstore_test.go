package memstore_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

func TestConformance(t *testing.T) {
	limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store {
		return memstore.New(memstore.Config{Now: now})
	})
}
