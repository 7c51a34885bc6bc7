package balancer_test

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/share"
)

// TestScenarios replays the scenarios in testdata: reports and rebalances
// at given times, and the shares expected after each. The language, one
// command a line:
//
//	regions R...                     the regions, in order
//	config min-share PPM down-after D
//	report T REGION GATEWAY span D total N [KEY/LIMIT=ASKED...]
//	rebalance T                      T is after the scenario's start
//	expect KEY/LIMIT PPM...          one share per region
//	expect KEY/LIMIT unbalanced
//	expect default PPM...
//	expect up REGION...              exactly these regions are up
//	expect none                      the last rebalance gave no plan
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScenario(t, file) })
	}
}

func runScenario(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var (
		cfg  balancer.CoreConfig
		core *balancer.Core
		plan *balancer.Plan
	)
	dur := func(line int, s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		return d
	}
	num := func(line int, s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		return n
	}
	shares := func(line int, fs []string) []uint32 {
		var out []uint32
		for _, f := range fs {
			out = append(out, uint32(num(line, f)))
		}
		return out
	}
	need := func(line int) {
		if core == nil {
			c, err := balancer.NewCore(cfg)
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			core = c
		}
	}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		switch cmd, args := fs[0], fs[1:]; {
		case cmd == "regions":
			cfg.Regions = args
		case cmd == "config" && len(args) == 4:
			cfg.MinShare, cfg.DownAfter = uint32(num(line, args[1])), dur(line, args[3])
		case cmd == "report" && len(args) >= 7:
			need(line)
			r := balancer.Report{Region: args[1], Gateway: args[2], SpanMillis: dur(line, args[4]).Milliseconds(), Total: num(line, args[6])}
			for _, p := range args[7:] {
				pair, asked, _ := strings.Cut(p, "=")
				key, lim, _ := strings.Cut(pair, "/")
				r.Pairs = append(r.Pairs, balancer.PairReport{Key: key, Limit: lim, Asked: num(line, asked), Admitted: num(line, asked)})
			}
			if _, err := core.Report(t0.Add(dur(line, args[0])), r); err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
		case cmd == "rebalance" && len(args) == 1:
			need(line)
			plan = core.Rebalance(t0.Add(dur(line, args[0])))
		case cmd == "expect" && len(args) == 1 && args[0] == "none":
			if plan != nil {
				t.Errorf("line %d: got a plan, want none", line)
			}
		case cmd == "expect" && plan == nil:
			t.Fatalf("line %d: no plan to check", line)
		case cmd == "expect" && args[0] == "default":
			if got, want := plan.Defaults, shares(line, args[1:]); !slices.Equal(got, want) {
				t.Errorf("line %d: got default %v, want %v", line, got, want)
			}
		case cmd == "expect" && args[0] == "up":
			for i, r := range cfg.Regions {
				if want := slices.Contains(args[1:], r); plan.Up[i] != want {
					t.Errorf("line %d: region %s: got up %v, want %v", line, r, plan.Up[i], want)
				}
			}
		case cmd == "expect" && len(args) >= 2:
			key, lim, _ := strings.Cut(args[0], "/")
			pp := plan.Pairs[share.Pair{Key: key, Limit: lim}]
			switch {
			case args[1] == "unbalanced":
				if pp != nil {
					t.Errorf("line %d: %s: got shares %v, want none", line, args[0], pp.Shares)
				}
			case pp == nil:
				t.Errorf("line %d: %s: got no shares, want %v", line, args[0], args[1:])
			default:
				if want := shares(line, args[1:]); !slices.Equal(pp.Shares, want) {
					t.Errorf("line %d: %s: got shares %v, want %v", line, args[0], pp.Shares, want)
				}
			}
		default:
			t.Fatalf("line %d: cannot read %q", line, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
