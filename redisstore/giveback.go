package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
)

//go:embed lua/giveback.lua
var giveBackScript string

// giveBack is lua/giveback.lua, run by digest; it is not part of the
// take's library, since only callers that take several keys apart need it.
var giveBack = rueidis.NewLuaScript(giveBackScript)

// GiveBack returns req's cost to every limit of req in one call on the
// key's node, undoing a take that was allowed: for a caller that took
// several keys in separate calls (each key is one atomic call, and keys
// of a cluster live on different nodes) and must let go of the ones that
// granted when another refused. No limit is given more than it holds (a
// bucket never above its burst, a window's count never below zero), and a
// state that expired meanwhile, full already, is left alone. The tokens
// were in use between the take and the give-back: a take of the same key
// meanwhile saw them gone. Errors are Take's.
func (s *Store) GiveBack(ctx context.Context, req *limit.Request) error {
	if s.closed.Load() {
		return errClosed
	}
	l := s.link.Load()
	if l == nil {
		return s.errNotConnected()
	}
	keys := make([]string, len(req.Limits))
	args := make([]string, 1+len(req.Limits))
	args[0] = strconv.FormatInt(req.EffectiveCost(), 10)
	var b []byte
	for i := range req.Limits {
		lim := &req.Limits[i]
		keys[i] = string(appendKey(b[:0], s.prefix, req.Key, lim))
		args[1+i] = fmt.Sprintf("%s %d %d %d", lim.Alg(), lim.Count, lim.PeriodMillis(), lim.EffectiveBurst())
	}
	if err := giveBack.Exec(ctx, l.client, keys, args).Error(); err != nil {
		return fmt.Errorf("redisstore: give back %d tokens in slot %d: %w: %w", req.EffectiveCost(), Slot(req.Key), classify(err), err)
	}
	return nil
}
