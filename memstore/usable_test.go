package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// TestHugeSlidingLogRefused takes a sliding log longer than
// limit.MaxLogCount, which Request.Validate refuses and an embedder may
// still send a store directly: memstore refuses it as invalid rather than
// allocate the log (a cap out of range panics; a billion entries would
// take the process down).
func TestHugeSlidingLogRefused(t *testing.T) {
	s := New(Config{})
	l := limit.Limit{Name: "l", Count: 1 << 60, Period: time.Second, Algorithm: limit.SlidingLog}
	_, err := s.Take(context.Background(), &limit.Request{Key: "k", Cost: 1 << 59, Limits: []limit.Limit{l}})
	if !errors.Is(err, limit.ErrInvalid) {
		t.Fatalf("got %v, want an error matching limit.ErrInvalid", err)
	}
}
