package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
)

// TakeUpTo takes as many tokens as every limit of req can spare, at least
// req's cost and at most want, in one script run, and reports how many it
// took. A token lease draws its batches with it: the tokens leave Redis
// before any gateway spends them. When granted is positive, d describes the
// limits after the take; when it is zero, d is the refusal Take would have
// given req. A want below the cost means the cost. Errors are Take's.
func (s *Store) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (granted int64, d limit.Decision, err error) {
	if err := req.Validate(); err != nil {
		return 0, limit.Decision{}, err
	}
	if want < 1 {
		return 0, limit.Decision{}, fmt.Errorf("redisstore: want %d tokens: must be at least 1", want)
	}
	if s.closed.Load() {
		return 0, limit.Decision{}, errClosed
	}
	cost := req.EffectiveCost()
	want = max(want, cost)
	var now int64 // 0 asks the script to read Redis's clock
	if s.now != nil {
		if now = s.now().UnixMilli(); now <= 0 {
			return 0, limit.Decision{}, fmt.Errorf("redisstore: clock reads %d ms, not after the Unix epoch", now)
		}
	}
	sc := s.scratch.Get().(*scratch)
	defer s.putScratch(sc)
	sc.build(s.prefix, req, now)
	sc.args = append(sc.args, strconv.FormatInt(want, 10))
	resp := s.upto.Exec(ctx, s.client, sc.keys, sc.args)
	if err := resp.Error(); err != nil {
		return 0, limit.Decision{}, fmt.Errorf("redisstore: take up to %d in slot %d: %w: %w", want, Slot(req.Key), classify(err), err)
	}
	msgs, err := resp.ToArray()
	if err == nil {
		granted, sc.outs, err = grant(sc.outs[:0], msgs, len(req.Limits), cost, want)
	}
	if err != nil {
		return 0, limit.Decision{}, fmt.Errorf("redisstore: take up to %d in slot %d: %w: %w", want, Slot(req.Key), ErrReply, err)
	}
	d = limit.Decide(sc.outs)
	d.Source = limit.FromRedis
	return granted, d, nil
}

// grant checks a TakeUpTo reply for n limits: the grant, then a Take reply.
func grant(outs []limit.Outcome, msgs []rueidis.RedisMessage, n int, cost, want int64) (int64, []limit.Outcome, error) {
	if len(msgs) < 1 || !msgs[0].IsInt64() {
		return 0, outs, fmt.Errorf("reply does not start with the number of tokens granted")
	}
	g, _ := msgs[0].ToInt64()
	outs, err := outcomes(outs, msgs[1:], n)
	if err != nil {
		return 0, outs, err
	}
	allowed := limit.Decide(outs).Allowed
	if allowed && (g < cost || g > want) || !allowed && g != 0 {
		return 0, outs, fmt.Errorf("reply grants %d tokens (allowed %v) for cost %d, want %d", g, allowed, cost, want)
	}
	return g, outs, nil
}
