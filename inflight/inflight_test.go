package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/inflight"
	"github.com/sluice-rl/sluice/limit"
)

// down is a backend whose every call fails: a Redis outage, injected.
type down struct{}

func (down) Acquire(context.Context, string, string, int64, time.Duration) (bool, int64, time.Duration, error) {
	return false, 0, 0, errors.New("connection refused")
}
func (down) Release(context.Context, string, string) error { return errors.New("connection refused") }

// TestOutage checks what a gateway admits while the shared record cannot
// answer: its share of the limit, ceil(N / gateways), counted locally and
// given back on release; a fail-closed limit refuses.
func TestOutage(t *testing.T) {
	for _, tt := range []struct {
		name       string
		most       int64
		gateways   int
		failClosed bool
		want       int // slots taken out of 10 tries
		src        limit.Source
	}{
		{"share of 5 over 3", 5, 3, false, 2, limit.FromLocalFallback},
		{"share of 2 over 3", 2, 3, false, 1, limit.FromLocalFallback},
		{"one gateway", 4, 1, false, 4, limit.FromLocalFallback},
		{"fail closed", 5, 3, true, 0, limit.FromFailClosed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := inflight.New(down{}, inflight.Config{Fleet: limit.Fleet{Gateways: tt.gateways}})
			if err != nil {
				t.Fatal(err)
			}
			var held []inflight.Slot
			for range 10 {
				slot, d := s.Acquire(t.Context(), "k:a", tt.most, tt.failClosed)
				if d.Source != tt.src {
					t.Fatalf("source %s, want %s", d.Source, tt.src)
				}
				if d.Allowed {
					held = append(held, slot)
				}
			}
			if len(held) != tt.want {
				t.Fatalf("took %d slots, want %d", len(held), tt.want)
			}
			for _, sl := range held {
				sl.Release()
				sl.Release() // a second release does nothing
			}
			if tt.want > 0 {
				if _, d := s.Acquire(t.Context(), "k:a", tt.most, false); !d.Allowed || d.InFlight != 1 {
					t.Errorf("after release: %+v, want a slot with 1 in flight", d)
				}
			}
		})
	}
}

// In process (no shared store), at most 2 requests of a key in flight.
func Example() {
	s, err := inflight.New(nil, inflight.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, d1 := s.Acquire(context.Background(), "k:key_pro", 2, false)
	b, d2 := s.Acquire(context.Background(), "k:key_pro", 2, false)
	_, d3 := s.Acquire(context.Background(), "k:key_pro", 2, false)
	fmt.Println(d1.Allowed, d2.Allowed, d3.Allowed, d3.InFlight)
	a.Release()
	b.Release()
	_, d4 := s.Acquire(context.Background(), "k:key_pro", 2, false)
	fmt.Println(d4.Allowed, d4.InFlight)
	// Output:
	// true true false 2
	// true 1
}
