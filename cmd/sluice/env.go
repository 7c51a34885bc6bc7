package main

import (
	"flag"
	"fmt"
	"strings"
)

// envName returns the environment variable that stands for the flag
// called name: SLUICE_, then the name in upper case with its dashes as
// underscores (--redis-timeout is also $SLUICE_REDIS_TIMEOUT).
func envName(name string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envRule returns the lines of a command's usage that say how its flags
// are read from the environment, with one of fs's own flags as the
// example.
func envRule(fs *flag.FlagSet) string {
	var example string
	fs.VisitAll(func(f *flag.Flag) {
		if example == "" || (!strings.Contains(example, "-") && strings.Contains(f.Name, "-")) {
			example = f.Name
		}
	})
	return "Every flag can also be set in the environment: --" + example + " as " + envName(example) + ", and so on.\n" +
		"A flag on the command line wins; an empty variable counts as unset."
}

// setFromEnv sets each flag of fs that the command line did not set from
// its environment variable (see envName), looked up with lookup, when
// that variable is set and not empty. It is called after fs.Parse, so a
// flag given on the command line beats the environment. An invalid value
// is refused with an error that names the variable, its value and the
// flag.
func setFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("$%s=%q: invalid value for --%s: %w", name, v, f.Name, serr)
		}
	})
	return err
}
