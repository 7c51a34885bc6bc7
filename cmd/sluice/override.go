package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// runOverride runs sluice override set, list or end.
func runOverride(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runVerbs(ctx, "override", []command{
		{"set", "set an API key's emergency override (every gateway at once)", runOverrideSet},
		{"list", "list the emergency overrides", runOverrideList},
		{"end", "end an API key's emergency override", runOverrideEnd},
	}, args, stdout, stderr)
}

func runOverrideSet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var lim rules.Limit
	var rate, per, burst, forDur, until, reason, failMode, algorithm string
	fs, o := newAdminFlagSet("override set", "KEY --rate N --per DURATION (--for DURATION | --until TIME) --reason TEXT [flags]", stderr,
		"Sets the emergency override of the API key KEY: one limit that replaces every",
		"other limit of the key, on every gateway at once (no canary), until it expires.",
		"It replaces any override the key has. Every override says why and when it ends,",
		"at most the service's --max-override (7 days by default) from now.",
	)
	fs.StringVar(&rate, "rate", "", "tokens per --per (a number, such as 5 or 0.5)")
	fs.StringVar(&per, "per", "", "the `duration` --rate counts over: 90ms, 1s, 1m, 1h, 1d")
	fs.StringVar(&burst, "burst", "", "most tokens the key can hold (default: --rate)")
	fs.StringVar(&algorithm, "algorithm", "", "token_bucket (default), gcra, sliding_window, sliding_log or fixed_window")
	fs.StringVar(&lim.Name, "name", "override", "the limit's `name`, as the gateway's headers and logs show it")
	fs.StringVar(&forDur, "for", "", "how long the override lasts from now (`duration`: 30m, 2h, 1d)")
	fs.StringVar(&until, "until", "", "when the override ends (RFC 3339 `time`, such as 2026-12-10T18:00:00Z)")
	fs.StringVar(&reason, "reason", "", "why the key is overridden (required; goes to the audit log)")
	fs.StringVar(&failMode, "fail-mode", "", "open (default) or closed: what the limit does while Redis is down")
	pos, err := parseArgs(fs, args, "KEY")
	if err != nil {
		return err
	}
	bad := func(format string, a ...any) error { return usagef(fs, format, a...) }
	now := time.Now()
	var ov admin.Override
	switch {
	case rate == "" || per == "":
		return bad("--rate and --per are required")
	case (forDur == "") == (until == ""):
		return bad("give one of --for and --until")
	case strings.TrimSpace(reason) == "":
		return bad("--reason is required: say why the key is overridden")
	}
	if err := json.Unmarshal([]byte(rate), &lim.Rate); err != nil {
		return bad("--rate %q: want a number of tokens, such as 5 or 0.5", rate)
	}
	if err := lim.Per.UnmarshalText([]byte(per)); err != nil {
		return bad("--per %q: %v", per, err)
	}
	if burst != "" {
		if err := json.Unmarshal([]byte(burst), &lim.Burst); err != nil {
			return bad("--burst %q: want a whole number of tokens", burst)
		}
	}
	lim.Algorithm = limit.Algorithm(algorithm)
	if forDur != "" {
		d, err := rules.ParseDuration(forDur)
		if err != nil {
			return bad("--for %q: %v", forDur, err)
		}
		ov.ExpiresAt = now.Add(time.Duration(d)).UTC().Truncate(time.Second)
	} else if ov.ExpiresAt, err = time.Parse(time.RFC3339, until); err != nil {
		return bad("--until %q: want an RFC 3339 time, such as %s", until, now.Add(2*time.Hour).UTC().Format(time.RFC3339))
	}
	ov.Limits, ov.Reason, ov.FailMode = []rules.Limit{lim}, reason, rules.FailMode(failMode)
	c, err := o.client(os.Getenv)
	if err != nil {
		return err
	}
	res, err := c.SetOverride(ctx, pos[0], ov)
	if err != nil {
		return adminError("override "+pos[0], err)
	}
	fmt.Fprintf(stdout, "override of %s set until %s: rule %d in version %d (%s)\n", pos[0],
		ov.ExpiresAt.UTC().Format(time.RFC3339), res.After.ID, res.Snapshot.Version, rolloutNote(res.Snapshot))
	return nil
}

func runOverrideList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := newAdminFlagSet("override list", "[flags]", stderr,
		"Lists the emergency overrides: the key, its limits, when it ends and why.",
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := o.client(os.Getenv)
	if err != nil {
		return err
	}
	ovs, err := c.Overrides(ctx)
	if err != nil {
		return adminError("list overrides", err)
	}
	if len(ovs) == 0 {
		fmt.Fprintln(stdout, "no overrides")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tRULE\tLIMITS\tEXPIRES\tREASON")
	for _, v := range ovs {
		var lims []string
		for _, l := range v.Limits {
			lims = append(lims, fmt.Sprintf("%s %s/%s", l.Name, l.Rate, l.Per))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", v.Match.Key, v.ID, strings.Join(lims, ", "),
			v.ExpiresAt.UTC().Format(time.RFC3339), v.Reason)
	}
	return tw.Flush()
}

func runOverrideEnd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := newAdminFlagSet("override end", "KEY [flags]", stderr,
		"Ends the emergency override of the API key KEY, on every gateway at once.",
	)
	pos, err := parseArgs(fs, args, "KEY")
	if err != nil {
		return err
	}
	c, err := o.client(os.Getenv)
	if err != nil {
		return err
	}
	pub, err := c.EndOverride(ctx, pos[0])
	if err != nil {
		return adminError("end override of "+pos[0], err)
	}
	fmt.Fprintf(stdout, "override of %s ended in version %d (%s)\n", pos[0], pub.Version, rolloutNote(pub))
	return nil
}
