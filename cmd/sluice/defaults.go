package main

import (
	_ "embed"
	"time"
)

// defaultRules is the rule set the gateway enforces without --rules or
// --rules-url: a demo key with small limits, a default and an ip rule.
//
//go:embed defaultrules.yaml
var defaultRules []byte

// Defaults of the gateway's flags.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultShutdownTimeout = 30 * time.Second
)
