package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// newStore returns the store the gateway's buckets live in, and a function
// that releases it: Redis with --redis, else the process's memory.
func newStore(ctx context.Context, opts gatewayOptions, logger *slog.Logger) (limit.Store, func(), error) {
	if len(opts.Redis) == 0 {
		logger.LogAttrs(ctx, slog.LevelInfo, "counting in process; pass --redis to share limits between gateways")
		return memstore.New(memstore.Config{}), func() {}, nil
	}
	return nil, nil, errors.New("--redis: the Redis store is not available yet")
}
