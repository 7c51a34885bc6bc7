package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pipeline"
)

// fleetOptions are the flags of `sluice bench --fleet`.
type fleetOptions struct {
	scenarios, modes string
	local            bool
	allowRemote      bool
	offered          float64
	workers          int
	duration         time.Duration
	seed             uint64
	jsonPath         string
	htmlPath         string
	maxErrorRate     float64
	pipeline         pipeline.Config
	command          string
}

// runFleet runs the fleet scenarios: many virtual gateways in this process,
// each with its own stack, over a Redis given by address or started here
// (--local), and writes the summary, the JSON and the HTML report.
func runFleet(ctx context.Context, o fleetOptions, stdout, stderr io.Writer) error {
	scs, err := bench.SelectScenarios(bench.Scenarios(o.offered), o.scenarios)
	if err != nil {
		return fmt.Errorf("bench: --scenario: %w", err)
	}
	modes, err := bench.ParseModes(o.modes)
	if err != nil {
		return fmt.Errorf("bench: --modes: %w", err)
	}
	if o.maxErrorRate < 0 || o.maxErrorRate > 1 {
		return fmt.Errorf("bench: --max-error-rate %v: want a share from 0 to 1", o.maxErrorRate)
	}
	var target bench.Target
	switch {
	case o.local && len(o.pipeline.Redis.Addrs) > 0:
		return errors.New("bench: --local starts its own Redis: give it or --redis, not both")
	case o.local:
		stop, err := startLocal(&target, scs, stderr)
		if err != nil {
			return fmt.Errorf("bench: --local: %w", err)
		}
		defer stop()
	case len(o.pipeline.Redis.Addrs) == 0:
		return errors.New("bench: --fleet needs a Redis: --redis ADDRS, or --local to start redis-server processes here")
	default:
		if !o.allowRemote {
			if err := bench.Loopback(o.pipeline.Redis.Addrs); err != nil {
				return fmt.Errorf("bench: --redis: %w", err)
			}
		}
		target.Addrs = o.pipeline.Redis.Addrs
	}
	if err := target.CheckNeeds(scs); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cfg := bench.FleetConfig{Target: target, Gateways: o.pipeline.Fleet.Gateways, Workers: o.workers, Duration: o.duration,
		Rate: o.offered, Modes: modes, Seed: o.seed, Pipeline: o.pipeline, Progress: stderr, MaxErrorRate: o.maxErrorRate}
	rep, runErr := bench.RunFleet(ctx, cfg, scs)
	if rep == nil {
		return fmt.Errorf("bench: %w", runErr)
	}
	rep.Command = o.command
	rep.Target = targetName(target)
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if err := writeReports(rep, o.jsonPath, o.htmlPath, stdout); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if runErr != nil {
		return fmt.Errorf("bench: %w", runErr)
	}
	if err := rep.Check(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// startLocal starts what the scenarios need: a standalone redis-server for
// all but the outage, and a cluster of 3 primaries with a replica each for
// it. stop kills them all.
func startLocal(t *bench.Target, scs []bench.Scenario, stderr io.Writer) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	needCluster, needOther := false, false
	for _, sc := range scs {
		if sc.Needs == "cluster" {
			needCluster = true
		} else {
			needOther = true
		}
	}
	if needOther {
		s, sstop, err := redistest.NewStandalone()
		if err != nil {
			return stop, err
		}
		stops = append(stops, sstop)
		t.Standalone, t.Addrs = s, []string{s.Addr()}
		fmt.Fprintf(stderr, "started redis-server on %s\n", s.Addr())
	}
	if needCluster {
		c, cstop, err := redistest.NewCluster(3, 1)
		if err != nil {
			stop()
			return func() {}, err
		}
		stops = append(stops, cstop)
		t.Cluster, t.ClusterAddrs = c, c.Addrs()
		fmt.Fprintf(stderr, "started a Redis Cluster (3 primaries, 1 replica each) on %s\n", strings.Join(c.Addrs(), ","))
	}
	return stop, nil
}

func targetName(t bench.Target) string {
	var parts []string
	if t.Standalone != nil {
		parts = append(parts, "redis-server started by the run ("+t.Standalone.Addr()+")")
	} else if len(t.Addrs) > 0 {
		parts = append(parts, "redis "+strings.Join(t.Addrs, ","))
	}
	if t.Cluster != nil {
		parts = append(parts, "Redis Cluster started by the run (3 primaries, 1 replica each)")
	}
	return strings.Join(parts, "; ")
}

// writeReports writes the JSON and the HTML report, each when its path is
// not empty.
func writeReports(rep *bench.Report, jsonPath, htmlPath string, stdout io.Writer) error {
	if jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --json: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", jsonPath)
	}
	if htmlPath != "" {
		f, err := os.Create(htmlPath)
		if err != nil {
			return fmt.Errorf("write --html: %w", err)
		}
		if err := bench.WriteHTML(f, rep); err != nil {
			f.Close()
			return fmt.Errorf("write --html: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("write --html: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", htmlPath)
	}
	return nil
}
