package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/share"
)

// runExplain runs sluice explain: why a key is limited, asked of the rules
// service or of a running gateway's metrics address.
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var gatewayURL, method, path, region string
	var asJSON bool
	fs, o := newAdminFlagSet("explain", "KEY --path PATH [--method GET] [--gateway URL | --rules-url URL] [flags]", stderr,
		"Explains why the API key KEY is limited on a request: its plan and org, every",
		"rule that matches with its scope and source (an override's reason and expiry),",
		"the region share, the tightest limit, the key's buckets now, and the last",
		"refusal the gateways reported (from the rules service only).",
		"Asks the rules service (--rules-url, with a read token), or with --gateway a",
		"running gateway's metrics address (--metrics-listen), which needs no token.",
	)
	fs.StringVar(&gatewayURL, "gateway", "", "`URL` of a running gateway's metrics address, such as http://127.0.0.1:9090, asked instead of the rules service")
	fs.StringVar(&method, "method", "GET", "the request's `method`")
	fs.StringVar(&path, "path", "", "the request's `path`, such as /v1/search (required)")
	fs.StringVar(&region, "region", "", "the `region` whose shares to show, read by the rules service from its --balancer-url (a gateway shows its own)")
	fs.BoolVar(&asJSON, "json", false, "print the answer as JSON")
	pos, err := parseArgs(fs, args, "KEY")
	if err != nil {
		return err
	}
	if len(pos) != 1 || path == "" {
		err := errors.New("give the API key and --path")
		fmt.Fprintln(stderr, err)
		return usageError{err}
	}
	var c *admin.Client
	if gatewayURL != "" {
		if !strings.HasPrefix(gatewayURL, "http://") && !strings.HasPrefix(gatewayURL, "https://") {
			return fmt.Errorf("--gateway %q: want an http:// or https:// URL", gatewayURL)
		}
		c = &admin.Client{BaseURL: strings.TrimSuffix(gatewayURL, "/")}
	} else if c, err = o.client(os.Getenv); err != nil {
		return err
	}
	e, err := c.ExplainRegion(ctx, pos[0], strings.ToUpper(method), path, region)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(e)
	}
	printExplanation(stdout, &e)
	return nil
}

// printExplanation writes e for a person: the key, then one line a limit.
func printExplanation(w io.Writer, e *admin.Explanation) {
	who := "unknown key (the default rules apply)"
	if e.Known {
		who = "plan " + e.Plan
		if e.Org != "" {
			who += ", org " + e.Org
		}
	}
	ep := cmp.Or(e.Endpoint, "no endpoint")
	fmt.Fprintf(w, "key %s (%s): %s\n%s %s: %s, cost %d; rules version %d\n", e.Key, e.KeyHash, who, e.Method, e.Path, ep, e.Cost, e.RulesVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tRATE\tBURST\tRULE\tSCOPE\tSTATUS\tSHARE\tLEFT\tFULL IN")
	for _, l := range e.Limits {
		status := "in force"
		switch {
		case l.Expired:
			status = "expired"
		case !l.InForce:
			status = "displaced"
		}
		if l.Shadow {
			status += ", shadow"
		}
		if l.Tightest {
			status += ", tightest"
		}
		rule := fmt.Sprintf("#%d v%d", l.Rule.ID, l.Rule.Version)
		if l.Rule.ID == 0 {
			rule = l.Rule.Source
		}
		scope := string(l.Rule.Scope)
		for _, m := range []string{l.Rule.Match.Plan, l.Rule.Match.Endpoint} {
			if m != "" {
				scope += " " + m
			}
		}
		if l.Rule.Override {
			scope += fmt.Sprintf(" override until %s (%s)", l.Rule.ExpiresAt.Format(time.RFC3339), l.Rule.Reason)
		}
		share, left, full := "-", "-", "-"
		if l.Share != nil {
			share = fmt.Sprintf("%.4g%%", 100*l.Share.Fraction)
		}
		if l.State != nil {
			left = fmt.Sprint(l.State.Remaining)
			full = (time.Duration(l.State.FullInMillis) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d/%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Count, l.Per, l.Burst, rule, scope, status, share, left, full)
	}
	tw.Flush()
	if e.StateError != "" {
		fmt.Fprintf(w, "state not read: %s\n", e.StateError)
	}
	for _, rr := range e.Refused {
		fmt.Fprintf(w, "rule #%d (rules version %d) refused %d requests; busiest keys:", rr.Rule, rr.RulesVersion, rr.Refused)
		for _, k := range rr.Keys {
			fmt.Fprintf(w, " %s (%d)", k.Key, k.Count)
		}
		fmt.Fprintln(w)
	}
	if r := e.LastRefusal; r != nil {
		fmt.Fprintf(w, "last refused by rule #%d (limit %s, rules version %d), reported at %s\n", r.Rule, r.Limit, r.RulesVersion, r.At.Format(time.RFC3339))
	}
}

// gatewayExplain is the gateway's explain handler on its metrics address:
// its rules, its shared store read without leases (Redis, or the
// in-process store when no region share sits on top of it), and its
// region shares.
func gatewayExplain(src gateway.RuleSource, p *pipeline.Pipeline, opts gatewayOptions) (http.Handler, error) {
	cfg := gateway.ExplainConfig{Rules: src, Source: opts.Rules}
	if opts.RulesURL != "" {
		cfg.Source = ""
	} else if opts.Rules == "" {
		cfg.Source = "built-in demo rules"
	}
	switch {
	case p.Redis() != nil:
		cfg.Store = p.Redis()
	case p.Shares() == nil:
		cfg.Store = p // in process: memstore itself
	}
	if sh := p.Shares(); sh != nil {
		cfg.Share = func(key, name string) (limit.Fraction, bool) {
			return limit.Fraction{Num: int64(sh.Share(key, name)), Den: share.Whole}, true
		}
	}
	return gateway.Explain(cfg)
}
