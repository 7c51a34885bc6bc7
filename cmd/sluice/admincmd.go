package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/admin"
)

// envAdminToken holds the admin token of sluice rules apply, override and
// rollout when --token-file is not given.
const envAdminToken = "SLUICE_ADMIN_TOKEN"

// minTokenLen is the shortest token the rules service accepts.
const minTokenLen = 16

// adminOptions are the flags every command of the admin API shares.
type adminOptions struct {
	url, tokenFile string
}

// addAdminFlags adds --rules-url and --token-file to fs.
func addAdminFlags(fs *flag.FlagSet, o *adminOptions) {
	fs.StringVar(&o.url, "rules-url", "http://127.0.0.1:8083", "`URL` of the rules service")
	fs.StringVar(&o.tokenFile, "token-file", "", "`file` holding the bearer token (read, or write for changes); default $"+envAdminToken)
}

// newAdminFlagSet is newFlagSet for a command of the admin API: it adds
// --rules-url and --token-file, into the options it returns, and the
// usage lines on the token.
func newAdminFlagSet(name, synopsis string, stderr io.Writer, about ...string) (*flag.FlagSet, *adminOptions) {
	fs := newFlagSet(name, synopsis, stderr, append(about, adminAbout)...)
	o := &adminOptions{}
	addAdminFlags(fs, o)
	return fs, o
}

// adminAbout is the usage lines on the token every admin command shows.
const adminAbout = "The token comes from --token-file, else from $" + envAdminToken + "; it is never a flag,\n" +
	"so that it stays out of the process list."

// client returns the admin API client o describes, reading the token.
func (o adminOptions) client(getenv func(string) string) (*admin.Client, error) {
	var tok string
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("--token-file %s is empty", o.tokenFile)
		}
	} else if tok = getenv(envAdminToken); tok == "" {
		return nil, fmt.Errorf("no token: give --token-file, or set $%s", envAdminToken)
	}
	if len(tok) < minTokenLen {
		return nil, fmt.Errorf("the token is %d bytes; the rules service's tokens are at least %d", len(tok), minTokenLen)
	}
	if !strings.HasPrefix(o.url, "http://") && !strings.HasPrefix(o.url, "https://") {
		return nil, fmt.Errorf("--rules-url %q: want an http:// or https:// URL", o.url)
	}
	return &admin.Client{BaseURL: o.url, Token: tok}, nil
}

// runVerbs runs the verb args[0] of the command name, such as override
// set, or prints the verbs and returns a usageError.
func runVerbs(ctx context.Context, name string, verbs []command, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintf(stderr, "usage: sluice %s VERB [flags]\n\nverbs:\n", name)
		for _, v := range verbs {
			fmt.Fprintf(stderr, "  %-8s %s\n", v.name, v.summary)
		}
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		addAdminFlags(fs, &adminOptions{})
		fmt.Fprintf(stderr, "\n%s\n\n%s\n\nRun \"sluice %s VERB -h\" for a verb's flags.\n", adminAbout, envRule(fs), name)
	}
	bad := func(err error) error {
		fmt.Fprintln(stderr, err)
		usage()
		return usageError{err}
	}
	var names []string
	for _, v := range verbs {
		names = append(names, v.name)
	}
	want := strings.Join(names, ", ")
	switch {
	case len(args) == 0:
		return bad(fmt.Errorf("want a verb: %s", want))
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		usage()
		return flag.ErrHelp
	case strings.HasPrefix(args[0], "-"):
		// As the flag package says it: the flags belong to the verbs.
		return bad(fmt.Errorf("flag provided but not defined: -%s", strings.TrimLeft(args[0], "-")))
	}
	for _, v := range verbs {
		if v.name == args[0] {
			return v.run(ctx, args[1:], stdout, stderr)
		}
	}
	return bad(fmt.Errorf("unexpected argument %q: want a verb: %s", args[0], want))
}

// parseArgs parses a verb's flags and its positional arguments, which may
// come before or after the flags: it wants exactly len(names) of them,
// and returns them.
func parseArgs(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	var pos []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") && len(pos) < len(names) {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return nil, usageError{err}
	}
	for fs.NArg() > 0 && len(pos) < len(names) {
		pos = append(pos, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return nil, usageError{err}
		}
	}
	if len(pos) < len(names) {
		return nil, usageOf(fs, fmt.Errorf("want %s", strings.Join(names, " ")))
	}
	// parseFlags refuses what is left and reads the environment.
	if err := parseFlags(fs, fs.Args()); err != nil {
		return nil, err
	}
	return pos, nil
}

// adminError says what a refusal of the service means for the command.
func adminError(what string, err error) error {
	if ae, ok := errors.AsType[*admin.Error](err); ok && ae.Field != "" && !strings.Contains(ae.Message, ae.Field) {
		return fmt.Errorf("%s: %w (field %s)", what, err, ae.Field)
	}
	return fmt.Errorf("%s: %w", what, err)
}
