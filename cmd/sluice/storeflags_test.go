package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestRedisDownAfterFollowsTimeout: the guard flags as a gateway over a
// real Redis runs them. A longer --redis-timeout moves the default
// --redis-down-after with it, never leaving it below the timeout (it used
// to stay at 15 ms whatever the timeout), and a down-after set below the
// timeout is refused with a message naming both.
func TestRedisDownAfterFollowsTimeout(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		wantErr string
	}{
		{nil, 75 * time.Millisecond, ""},
		{[]string{"--redis-timeout", "20ms"}, 75 * time.Millisecond, ""},
		{[]string{"--redis-timeout", "50ms"}, 150 * time.Millisecond, ""},
		{[]string{"--redis-timeout", "20ms", "--redis-down-after", "40ms"}, 40 * time.Millisecond, ""},
		{[]string{"--redis-timeout", "20ms", "--redis-down-after", "15ms"}, 0, "down after 15ms is below the timeout 20ms"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var cfg pipeline.Config
			addPipelineFlags(fs, &cfg)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg.Redis = redisstore.Config{Addrs: []string{srv.Addr()}}
			cfg.Fleet.Gateways = 1
			p, err := pipeline.New(t.Context(), cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					p.Close()
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			got := p.Guard().Config()
			if got.DownAfter != tc.want || got.DownAfter < got.Timeout {
				t.Errorf("timeout %v: down after %v, want %v (and not below the timeout)", got.Timeout, got.DownAfter, tc.want)
			}
		})
	}
}
