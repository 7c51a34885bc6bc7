package gateway

import (
	"log/slog"
	"time"

	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/striped"
	"github.com/sluice-rl/sluice/rules"
)

// Bounds of the decision log's sampling: at most one line per key per
// logEvery, and at most samplerKeys keys remembered, so that neither a
// flood of one key's refusals nor a flood of distinct keys can flood the
// log or grow the gateway's memory.
const (
	logEvery        = time.Second
	samplerShards   = 16
	samplerKeys     = 4096
	samplerPerShard = samplerKeys / samplerShards
)

// sampler lets through at most one log line per key per interval. The zero
// value is not usable; use newSampler. It is safe for concurrent use.
//
// It remembers when each key last had a line, in shards of at most
// samplerPerShard keys. A shard that is full forgets its keys whose interval
// is over, at most once an interval; until then new keys get no line.
type sampler struct {
	every  int64                       // ms
	shards *striped.Map[string, int64] // key → when its last line went out (Unix ms)
}

func newSampler(every time.Duration) *sampler {
	return &sampler{every: every.Milliseconds(), shards: striped.New[string, int64](samplerShards)}
}

// allow reports whether key may have a line at now (Unix ms), and if so
// counts it.
func (s *sampler) allow(key string, now int64) bool {
	sh := s.shards.Of(key)
	sh.Lock()
	defer sh.Unlock()
	if t, ok := sh.M[key]; ok {
		// A clock that went back lets the key through rather than
		// silencing it until the clock catches up.
		if d := now - t; d >= 0 && d < s.every {
			return false
		}
		sh.M[key] = now
		return true
	}
	if len(sh.M) >= samplerPerShard {
		if sh.SweptWithin(now, s.every) {
			return false
		}
		sh.Sweep(now, func(_ string, t int64) bool { d := now - t; return d < 0 || d >= s.every })
		if len(sh.M) >= samplerPerShard {
			return false
		}
	}
	sh.M[key] = now
	return true
}

// ruleAttrs describes a rule in a log line. With hashKey, a key rule's API
// key is written as keyhash.Of writes it (the form the rules
// service stores shadow reports in, so a caller's lines can be followed
// across gateways without the log holding an API key or an address).
func ruleAttrs(rule *rules.Rule, hashKey bool) slog.Value {
	attrs := []slog.Attr{slog.String("scope", string(rule.Scope))}
	key := rule.Match.Key
	if hashKey && key != "" {
		key = keyhash.Of(keyPrefix + key)
	}
	for _, kv := range [][2]string{{"plan", rule.Match.Plan}, {"endpoint", rule.Match.Endpoint}, {"key", key}, {"reason", rule.Reason}} {
		if kv[1] != "" {
			attrs = append(attrs, slog.String(kv[0], kv[1]))
		}
	}
	if isOverride(rule) {
		attrs = append(attrs, slog.Bool("override", true), slog.Time("expires_at", rule.ExpiresAt))
	}
	if rule.ID != 0 {
		attrs = append(attrs, slog.Int64("id", rule.ID))
	}
	if rule.Version != 0 {
		attrs = append(attrs, slog.Int64("version", rule.Version))
	}
	return slog.GroupValue(attrs...)
}
