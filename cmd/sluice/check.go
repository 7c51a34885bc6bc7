package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rules"
)

// The formats sluice check reads.
const (
	formatAuto  = "auto"
	formatRules = "rules"
	formatEnvoy = "envoy"
)

// runCheck validates a rules file, or an Envoy rate limit configuration as
// sluice rls reads it, without starting anything: nil when it is valid
// (warnings, such as rules that have already expired, go to stderr), an
// error naming the file, rule and field when it is not, a usageError for
// a command-line mistake.
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	format := formatAuto
	fs := newFlagSet("check", "[--format auto|rules|envoy] FILE", stderr,
		"Validates FILE without starting anything: a sluice rules file (gateway --rules),",
		"or envoyproxy/ratelimit's configuration (rls --config: a YAML file or a directory",
		"of them). Exit status 0 when valid, 1 when not, 2 for a usage error.",
	)
	fs.StringVar(&format, "format", format, "what FILE holds: rules, envoy, or auto (a directory, or a file with a top-level domain:, is envoy)")
	// FILE comes first or after the flags; anything after it is refused as
	// every command refuses a stray argument (parseFlags).
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() == 0 {
		return usageOf(fs, errors.New("want one FILE to check"))
	}
	path := fs.Arg(0)
	if err := parseFlags(fs, fs.Args()[1:]); err != nil {
		return err
	}
	if format != formatAuto && format != formatRules && format != formatEnvoy {
		return usageOf(fs, fmt.Errorf("--format %q: want auto, rules or envoy", format))
	}
	if format == formatAuto {
		var err error
		if format, err = detectFormat(path); err != nil {
			return err
		}
	}
	if format == formatEnvoy {
		r, warnings, err := rls.LoadRules(path)
		for _, w := range warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		if err != nil {
			return fmt.Errorf("%s: invalid Envoy rate limit configuration: %w", path, err)
		}
		fmt.Fprintf(stdout, "%s: valid Envoy rate limit configuration, domains %v\n", path, r.Domains())
		return nil
	}
	set, err := rules.LoadFile(path)
	if err != nil {
		return fmt.Errorf("%s: invalid rules: %w", path, err)
	}
	doc := set.Document()
	now := time.Now()
	expired := 0
	for i, r := range doc.Rules {
		if !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(now) {
			expired++
			fmt.Fprintf(stderr, "warning: %s: rules[%d] (%s): expires_at %s has passed: the rule applies to nothing\n",
				path, i, r.Scope, r.ExpiresAt.Format(time.RFC3339))
		}
	}
	fmt.Fprintf(stdout, "%s: valid rules: %d rules (%d expired), %d keys, %d endpoints, hash %s\n",
		path, len(doc.Rules), expired, len(doc.Keys), len(doc.Endpoints), set.Hash)
	return nil
}

// detectFormat tells an Envoy configuration (a directory, or YAML with a
// top-level domain) from a rules file.
func detectFormat(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		return formatEnvoy, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var top map[string]any
	if yaml.Unmarshal(b, &top) == nil {
		if _, ok := top["domain"]; ok {
			return formatEnvoy, nil
		}
	}
	return formatRules, nil
}
