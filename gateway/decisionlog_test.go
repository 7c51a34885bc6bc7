package gateway

import (
	"fmt"
	"testing"
	"time"
)

func TestSamplerOneLinePerKeyPerInterval(t *testing.T) {
	s := newSampler(time.Second)
	tests := []struct {
		key  string
		at   int64 // ms
		want bool
	}{
		{"k:a", 1000, true},
		{"k:a", 1000, false},
		{"k:b", 1000, true},
		{"k:a", 1999, false},
		{"k:a", 2000, true},
		{"k:a", 500, true}, // the clock went back: not silenced until it catches up
		{"k:a", 600, false},
	}
	for i, tt := range tests {
		if got := s.allow(tt.key, tt.at); got != tt.want {
			t.Errorf("step %d: allow(%q, %d) = %v, want %v", i, tt.key, tt.at, got, tt.want)
		}
	}
}

func TestSamplerMemoryIsBounded(t *testing.T) {
	// A flood of distinct keys at one instant: at most samplerKeys lines,
	// and no shard holds more than its share.
	s := newSampler(time.Second)
	allowed := 0
	for i := range 10 * samplerKeys {
		if s.allow(fmt.Sprintf("ip:%d", i), 1000) {
			allowed++
		}
	}
	if allowed > samplerKeys || allowed < samplerKeys/2 {
		t.Errorf("%d distinct keys at one instant: %d lines, want at most %d and most of them", 10*samplerKeys, allowed, samplerKeys)
	}
	for i := range s.shards.Stripes() {
		if n := len(s.shards.Stripes()[i].M); n > samplerPerShard {
			t.Errorf("shard %d holds %d keys, want at most %d", i, n, samplerPerShard)
		}
	}
	// An interval later the old keys make room for new ones.
	if !s.allow("k:new", 2000) {
		t.Errorf("a new key an interval later: no line, want one")
	}
}
