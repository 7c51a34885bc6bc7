package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

// runRulesCommand runs sluice rules apply, or else the rules service.
func runRulesCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "apply" {
		return runApply(ctx, args[1:], stdout, stderr)
	}
	return runRules(ctx, args, stdout, stderr)
}

// runApply applies a rules file to a running rules service in one
// version, printing the differences first.
func runApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var file string
	var dry bool
	fs, o := newAdminFlagSet("rules apply", "-f FILE [--dry-run] [flags]", stderr,
		"Makes the rules service's rule set the one in FILE (YAML, as gateway --rules reads),",
		"in one new version: the rules replace every rule but the emergency overrides, and",
		"the keys and endpoints sections, when FILE has them, replace the stored ones (leave",
		"a section out to keep what is stored). The differences with the current version",
		"are printed first, one a line: + added, - removed, ~ changed. A file that matches",
		"what is stored makes no version. --dry-run prints them and stores nothing.",
	)
	fs.StringVar(&file, "f", "", "rules `file` to apply (YAML); - for stdin")
	fs.BoolVar(&dry, "dry-run", false, "print the differences and store nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if file == "" {
		return usageOf(fs, errors.New("-f is required: the rules file to apply"))
	}
	doc, err := readRulesDocument(file)
	if err != nil {
		return err
	}
	c, err := o.client(os.Getenv)
	if err != nil {
		return err
	}
	res, err := c.ApplyRuleSet(ctx, doc, dry)
	if err != nil {
		return adminError("apply "+file, err)
	}
	printChanges(stdout, res.Changes)
	switch {
	case res.DryRun:
		fmt.Fprintf(stdout, "%s; dry run: nothing stored\n", plural(len(res.Changes), "change"))
	case res.Snapshot == nil:
		fmt.Fprintf(stdout, "no changes: the rule set already matches %s; no version made\n", file)
	default:
		fmt.Fprintf(stdout, "%s in version %d (%s)\n", plural(len(res.Changes), "change"), res.Snapshot.Version, rolloutNote(*res.Snapshot))
	}
	return nil
}

// readRulesDocument reads a rules file as written, without compiling it:
// the service compiles it with the sections the file leaves out.
func readRulesDocument(file string) (rules.Document, error) {
	var doc rules.Document
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return doc, fmt.Errorf("read rules file: %w", err)
	}
	if err := strictYAML(b, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return doc, fmt.Errorf("rules file %s is empty", file)
		}
		return doc, fmt.Errorf("rules file %s: %w", file, err)
	}
	if doc.Rules == nil {
		return doc, fmt.Errorf("rules file %s has no rules section: write rules: [] to remove every rule", file)
	}
	return doc, nil
}

// printChanges writes one line a change, and for a changed entry its old
// and new forms.
func printChanges(w io.Writer, cs []admin.Change) {
	mark := map[string]string{admin.OpAdd: "+", admin.OpRemove: "-", admin.OpChange: "~"}
	for _, c := range cs {
		name := c.Kind + " " + c.Name
		if c.Rule != 0 {
			name = fmt.Sprintf("rule %d: %s", c.Rule, c.Name)
		}
		fmt.Fprintf(w, "%s %s\n", mark[c.Op], name)
		if c.Op == admin.OpChange {
			fmt.Fprintf(w, "    - %s\n    + %s\n", c.Before, c.After)
		}
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// rolloutNote says how a published version reaches the gateways.
func rolloutNote(p admin.Published) string {
	var b strings.Builder
	b.WriteString(p.Rollout)
	if p.Rollout == "canary" {
		b.WriteString(": see sluice rollout status")
	}
	if p.Emergency != 0 {
		fmt.Fprintf(&b, "; emergency version %d goes to every gateway now", p.Emergency)
	}
	return b.String()
}
