package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// newStore returns the store the gateway's buckets live in, and a function
// that releases it: Redis with --redis (standalone or Cluster, as the
// servers answer), else the process's memory.
func newStore(ctx context.Context, opts gatewayOptions, logger *slog.Logger) (limit.Store, func(), error) {
	if len(opts.Redis) == 0 {
		logger.LogAttrs(ctx, slog.LevelInfo, "counting in process; pass --redis to share limits between gateways")
		return memstore.New(memstore.Config{}), func() {}, nil
	}
	s, err := redisstore.New(ctx, redisstore.Config{Addrs: opts.Redis, Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("--redis: %w", err)
	}
	mode := "standalone"
	if s.Cluster() {
		mode = "cluster"
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "counting in redis", slog.Any("addrs", opts.Redis), slog.String("mode", mode))
	return s, s.Close, nil
}
