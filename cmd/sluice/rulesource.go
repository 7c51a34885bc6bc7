package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/rules"
)

// newRuleSource returns where the gateway's rules come from: the rules
// file, the rules service, or the built-in demo rules. An invalid rules
// file is an error naming the file, the rule and the field.
func newRuleSource(ctx context.Context, opts gatewayOptions, logger *slog.Logger) (gateway.RuleSource, error) {
	switch {
	case opts.RulesURL != "":
		return nil, errors.New("--rules-url: rules service client not available yet")
	case opts.RulesCache != "":
		return nil, errors.New("--rules-cache needs --rules-url")
	case opts.Rules != "":
		set, err := rules.LoadFile(opts.Rules)
		if err != nil {
			return nil, err
		}
		logger.LogAttrs(ctx, slog.LevelInfo, "rules loaded", slog.String("file", opts.Rules), slog.String("hash", set.Hash))
		return gateway.StaticRules(set), nil
	}
	set, err := rules.Parse(defaultRulesName, defaultRules)
	if err != nil {
		return nil, err
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "using the built-in demo rules; pass --rules FILE for your own", slog.String("hash", set.Hash))
	return gateway.StaticRules(set), nil
}
