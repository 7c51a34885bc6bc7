package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/admin"
)

// runRollout runs sluice rollout status, promote or halt.
func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runVerbs(ctx, "rollout", []command{
		{"status", "show the stable version, the running canary and the newest rollouts", runRolloutStatus},
		{"promote", "promote the running canary to every gateway now", runRolloutDecide("promote")},
		{"halt", "halt the running canary: its gateways go back to the stable version", runRolloutDecide("halt")},
	}, args, stdout, stderr)
}

func runRolloutStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := newAdminFlagSet("rollout status", "[flags]", stderr,
		"Shows the stable version every gateway outside a canary runs, the running canary",
		"with each side's reported requests and refusal rate, and the newest rollouts.",
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := o.client(os.Getenv)
	if err != nil {
		return err
	}
	st, err := c.Rollout(ctx)
	if err != nil {
		return adminError("rollout status", err)
	}
	fmt.Fprintf(stdout, "stable version %d\n", st.Stable)
	for _, ro := range st.Rollouts {
		if ro.State != "canary" || ro.Canary == nil || ro.Rest == nil {
			continue
		}
		fmt.Fprintf(stdout, "canary version %d on %s since %s\n", ro.Version, strings.Join(ro.Canaries, ", "),
			ro.StartedAt.UTC().Format(time.RFC3339))
		for _, s := range []struct {
			name string
			side *admin.Side
		}{{"canary", ro.Canary}, {"rest", ro.Rest}} {
			fmt.Fprintf(stdout, "  %-6s %d gateways, %d requests, %d refused, refusal rate %.4f\n",
				s.name, s.side.Gateways, s.side.Requests, s.side.Refused, s.side.Rate)
		}
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tSTARTED\tDECIDED\tREASON")
	for _, ro := range st.Rollouts {
		decided := "-"
		if ro.DecidedAt != nil {
			decided = ro.DecidedAt.UTC().Format(time.RFC3339)
		}
		state := ro.State
		if ro.Emergency {
			state += " (emergency)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", ro.Version, state, ro.StartedAt.UTC().Format(time.RFC3339), decided, ro.Reason)
	}
	return tw.Flush()
}

// runRolloutDecide returns sluice rollout promote or halt.
func runRolloutDecide(how string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		var reason string
		about := "Promotes the running canary: every gateway takes its version now."
		if how == "halt" {
			about = "Halts the running canary: its gateways go back to the stable version."
		}
		fs, o := newAdminFlagSet("rollout "+how, "--reason TEXT [flags]", stderr, about)
		fs.StringVar(&reason, "reason", "", "why, for the audit log (required)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if strings.TrimSpace(reason) == "" {
			return usageOf(fs, errors.New("--reason is required: say why"))
		}
		c, err := o.client(os.Getenv)
		if err != nil {
			return err
		}
		decide := c.Promote
		if how == "halt" {
			decide = c.Halt
		}
		d, err := decide(ctx, reason)
		if err != nil {
			return adminError(how, err)
		}
		fmt.Fprintf(stdout, "version %d %s\n", d.Version, d.State)
		return nil
	}
}
