// Command sluice runs the sluice rate limiter: the gateway, the rules
// service, Envoy's rate limit service, the quota balancer, lease relays,
// and the tools around them. "sluice help" lists the commands (from
// commands, so the list cannot drift from the code), and
// "sluice COMMAND -h" prints a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/internal/process"
)

func main() {
	// SIGINT and SIGTERM end ctx; SIGHUP reloads what a command reloads,
	// and ends no command.
	ctx, stop := process.Signals(context.Background())
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: it returns nil on success, and an error that
// run prints otherwise.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"gateway", "run the rate-limiting gateway (in front of --upstream, or a built-in answer)", runGateway},
		{"rules", "run the rules service: rules in PostgreSQL, versioned snapshots pushed to gateways; rules apply -f FILE applies a file", runRulesCommand},
		{"rls", "serve Envoy's rate limit service (gRPC) from envoyproxy/ratelimit's configuration", runRLS},
		{"balancer", "run the quota balancer: each region's share of global limits follows its traffic", runBalancer},
		{"relay", "run a lease relay: a data centre's gateways lease tokens from it instead of Redis", runRelay},
		{"bench", "measure decision latency and throughput of a store or a running gateway", runBench},
		{"check", "validate a rules file or an Envoy rate limit configuration without starting anything", runCheck},
		{"plan", "size a deployment from traffic figures", func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return runPlan(args, stdout, stderr)
		}},
		{"override", "set, list or end emergency overrides of API keys on a running rules service", runOverride},
		{"explain", "explain why an API key is limited on a request, from the rules service or a running gateway", runExplain},
		{"rollout", "show, promote or halt the rollout of a rules version on a running rules service", runRollout},
		{"version", "print the version, the commit and the Go toolchain (also --version)", runVersion},
	}
}

// run runs the subcommand args names and returns the process's exit code:
// 0 on success, 1 when the command failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch _, isUsage := errors.AsType[usageError](err); {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case isUsage:
			// The flag package has already printed the problem and usage.
			return 2
		}
		// A command's errors may already start with its name
		// ("bench: ..."): print it once.
		fmt.Fprintf(stderr, "sluice %s: %s\n", c.name, strings.TrimPrefix(err.Error(), c.name+": "))
		return 1
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "sluice COMMAND -h" for a command's flags.`)
}

// newFlagSet returns a command's flag set: errors and usage go to stderr,
// and -h prints "usage: sluice NAME SYNOPSIS", the lines of about, how
// flags are read from the environment, and the flags.
func newFlagSet(name, synopsis string, stderr io.Writer, about ...string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, strings.TrimSpace("usage: sluice "+name+" "+synopsis))
		fmt.Fprintln(stderr)
		for _, line := range about {
			fmt.Fprintln(stderr, line)
		}
		fmt.Fprintln(stderr)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, envRule(fs))
			fmt.Fprintln(stderr)
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses a subcommand's flags, then sets those the command line
// did not from the environment (setFromEnv), and refuses positional
// arguments. Its errors are usageErrors: the problem, and the usage for a
// mistake on the command line, are already printed on the flag set's
// output.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageOf(fs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if err := setFromEnv(fs, os.LookupEnv); err != nil {
		return usagef(fs, "%w", err)
	}
	return nil
}

// usageOf is err, a mistake on fs's command line: it prints err and fs's
// usage on fs's output and returns err as a usageError.
func usageOf(fs *flag.FlagSet, err error) error {
	fmt.Fprintln(fs.Output(), err)
	fs.Usage()
	return usageError{err}
}

// usagef is a mistake on fs's command line found after parsing: it prints
// the problem and where to read the flags on fs's output, and returns it
// as a usageError.
func usagef(fs *flag.FlagSet, format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	fmt.Fprintf(fs.Output(), "%v\nRun \"sluice %s -h\" for the flags.\n", err, fs.Name())
	return usageError{err}
}

// usageError is a command-line mistake the flag package has reported.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
