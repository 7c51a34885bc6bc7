// Package redisstore is the limit.Store that keeps limit states in Redis, a
// standalone server or a Redis Cluster, so that every gateway shares them.
//
// A Take is one call of one Lua function on one Redis node: it refills,
// checks and takes every limit of the request atomically, reading Redis's
// own clock. TakeUpTo, which token leases draw their batches with, is the
// same call asked for more. All buckets of one request key share a hash
// tag, so they live in one cluster slot and one call reaches them all. The
// Lua arithmetic is the same integer arithmetic as limit.Evaluate, so a
// decision never depends on which store made it; the conformance suite in
// limit/limittest checks this.
//
// The client is rueidis: it pipelines concurrent commands on one
// connection per node without being asked, discovers a cluster from any
// seed address and follows its slot map. Takes themselves go on a second
// connection per node of the store's own, written by their callers
// (direct.go), and through rueidis whenever that one cannot serve them. The take is loaded once into
// every node as a Redis function library (FUNCTION LOAD) and called with
// FCALL; a server older than Redis 7 runs it as a script by digest
// (EVALSHA) instead.
package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
)

// Config configures a Store. Only Addrs is required; every other zero field
// means its default.
type Config struct {
	// Addrs are Redis addresses, "host:port". One address is a standalone
	// server unless it answers as a cluster node; several are seeds of a
	// cluster. The client tells which by asking, so nothing here says.
	// With MasterSet, they are Sentinels instead.
	Addrs []string
	// MasterSet, when set, makes Addrs the addresses of Redis Sentinels
	// that monitor a primary under this name: the store asks them for the
	// primary, and follows it when they fail it over to a replica. The
	// credentials and TLS are the primary's; the Sentinels are reached in
	// plaintext, without credentials. Empty means no Sentinel.
	MasterSet string
	// Prefix starts every key the store writes, so that sluice can share a
	// Redis with others. Empty means "sl:". It may not hold '{' or '}',
	// which would move keys' hash tags.
	Prefix string
	// Now, when set, is the clock each Take sends to the script in place of
	// Redis's own. It is for tests that drive a fake clock. Nil, as in
	// production, means Redis's TIME: one clock for every gateway. Under a
	// test clock, states are kept ten minutes longer than they need to be,
	// because Redis still expires keys by real time.
	Now func() time.Time
	// Logger receives the store's rare events: connecting, topology
	// refreshes. Nil discards them. Take never logs; it returns errors.
	Logger *slog.Logger
	// Username and Password authenticate each connection (AUTH). Empty
	// means none.
	Username, Password string
	// TLS, when set, makes every connection TLS with this configuration
	// (TLSFiles.Config builds one from files). Nil means plaintext. Its
	// ServerName, when empty, is each node's host as dialled.
	TLS *tls.Config
	// DialTimeout bounds opening one connection. Zero means 1s.
	DialTimeout time.Duration
	// ConnTimeout is how long a connection may wait for a reply before it
	// is closed as dead, failing every command in flight on it and making
	// the client look up the cluster's topology again. Zero means 1s.
	// Callers bound a single Take with its context; this is what notices a
	// node that stopped answering altogether.
	ConnTimeout time.Duration
	// RefreshInterval is how often the store reads a cluster's slot map
	// again for NodeAddr, so that it names a failed-over slot's new
	// primary. Zero means 5s; negative means never (call RefreshNodes).
	// A standalone server has no slot map to read; under Sentinel, it is
	// how often the store asks the Sentinels for the primary, besides
	// hearing their failover announcements.
	RefreshInterval time.Duration
	// FlushDelay, when positive, coalesces writes: each node gets one
	// connection, whose writer waits up to FlushDelay after each write to
	// gather the takes that arrive meanwhile into the next one (rueidis's
	// MaxFlushDelay). Under load that means fewer system calls per take,
	// at the cost of up to FlushDelay of latency; see docs/redis.md for
	// figures. Zero means no delay. Either way each node gets one
	// connection (see onePipe in connect.go).
	FlushDelay time.Duration
	// RueidisTakes, when true, sends takes through the rueidis client like
	// every other command. False, the default, sends each take on a
	// connection per node of the store's own, which its callers write
	// themselves (see direct.go): less CPU a take. Under Sentinel, with a
	// FlushDelay or with a Wrap that wraps, takes go through rueidis
	// regardless.
	RueidisTakes bool
	// Wrap, if set, wraps each client the store dials before its first
	// use, for instance with tracing.Redis for a span per command; the
	// store uses and closes what Wrap returns. A Wrap that returns a
	// client other than the one it was given sends takes through the
	// client too (see RueidisTakes), so that it sees them.
	// NewWithClient ignores it: wrap the client you pass instead.
	Wrap func(rueidis.Client) rueidis.Client
}

const (
	defaultPrefix      = "sl:"
	defaultDialTimeout = time.Second
	defaultConnTimeout = time.Second
	defaultRefresh     = 5 * time.Second
	// maxRedirects bounds how often one Take follows MOVED or ASK, so that a
	// cluster being resharded in circles fails a Take rather than loops
	// until its deadline, or forever without one.
	maxRedirects = 5
)

// The errors of Take, for errors.Is. Each wraps the underlying cause too,
// so errors.Is(err, context.DeadlineExceeded) and the like also work. A
// cancelled context is reported as context.Canceled and none of these.
var (
	// ErrTimeout is a Take that got no answer in time: the context's
	// deadline passed or a connection timed out. The script may or may not
	// have run, so the tokens may have been taken.
	ErrTimeout = errors.New("redis timed out")
	// ErrUnavailable is a Take that could not reach a node able to serve
	// the key: connection refused or lost, the cluster down or failing
	// over (CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, READONLY), a node
	// that cannot serve any key now (BUSY, OOM, MISCONF, NOAUTH, WRONGPASS,
	// NOPERM, NOREPLICAS), too many redirects, or the store closed.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrReply is a Take that Redis answered, but with an error the store
	// does not expect or a reply of the wrong shape: a bug, a script error,
	// or a foreign value in one of the store's keys. It is not an outage.
	// It wraps limit.ErrBadReply, so layers that judge a node's health
	// (guard) fail only the request.
	ErrReply = fmt.Errorf("unexpected redis reply (%w)", limit.ErrBadReply)
)

// Store is a limit.Store in Redis. It is safe for concurrent use. It owns
// its client connections; Close releases them.
type Store struct {
	// opt is how the client connects; read-only after New.
	opt rueidis.ClientOption
	// wrap is Config.Wrap; read-only after New.
	wrap func(rueidis.Client) rueidis.Client
	// link is the client and how takes run on it, once the store has
	// connected: nil before, when every take fails with ErrUnavailable.
	link atomic.Pointer[link]
	// attempt bounds one connection attempt, every step included.
	attempt time.Duration
	// refresh is how often the slot map of a cluster is read again.
	refresh time.Duration
	// stopConnect ends the background connector started by New when Redis
	// was unreachable; connectDone is closed when it has ended. Nil when
	// New connected.
	stopConnect context.CancelFunc
	connectDone chan struct{}
	// mu guards the refresh loop's start against Close.
	mu   sync.Mutex
	code takeCode
	// script is code.script, run by digest when !functions, and by a take
	// that found its node without the library.
	script     *rueidis.Lua
	reloading  atomic.Bool  // a reload of the library is under way; see exec
	lastReload atomic.Int64 // when the last reload started, Unix ns; 0 never
	// reloadMu guards stopping, and reloads.Add against reloads.Wait.
	reloadMu sync.Mutex
	stopping bool           // set by Close: start no more reloads
	reloads  sync.WaitGroup // reloads and slot-map reads under way (background); Close waits for them
	prefix   string
	now      func() time.Time
	log      *slog.Logger
	seeds    []string

	scratch sync.Pool // *scratch, reused by Take to build its command

	// pipes are the store's own connections for takes, by node address
	// (direct.go); nil when takes go through rueidis alone. Copied on
	// write under mu. pipeCtx ends with Close, which waits for pipesRun.
	direct     bool // the configuration allows them; see link.direct
	pipes      atomic.Pointer[map[string]*pipe]
	pipeCtx    context.Context
	stopPipes  context.CancelFunc
	pipesRun   sync.WaitGroup
	refreshing atomic.Bool // a refresh of the slot map after MOVED is under way

	topo  atomic.Pointer[topology] // slot owners as last read; see NodeAddr
	wires *wires                   // the client's connections, watched; see Stalled

	stopRefresh context.CancelFunc // ends the refresh loop; nil without one; guarded by mu
	refreshDone chan struct{}      // closed when the refresh loop has ended; guarded by mu
	closeOnce   sync.Once
	closed      atomic.Bool // set by Close; Take and TakeUpTo refuse after it
	borrowed    bool        // the client is the caller's (NewWithClient): Close leaves it open
}

var _ limit.Store = (*Store)(nil)

// New returns a Store connected to Redis, or connecting. It fails if the
// configuration is invalid, if a server refuses it (a TLS handshake that
// fails, such as rediss:// to a plaintext port; wrong credentials), or if
// ctx ends first. A Redis that cannot be reached (refused, silent, no
// route) is an outage, not an error: New returns a Store whose takes fail
// fast with ErrUnavailable, which the guard answers locally, while it
// connects in the background (see connect.go) until Redis answers;
// Connected and Down report it. Every step of a connection attempt has a deadline:
// DialTimeout bounds the TCP connect, the TLS handshake and HELLO/AUTH,
// ConnTimeout each later reply (PING, CLUSTER SLOTS).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("redisstore: no Redis address configured")
	}
	for _, a := range cfg.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("redisstore: address %q: %w", a, err)
		}
	}
	if cfg.DialTimeout < 0 || cfg.ConnTimeout < 0 || cfg.FlushDelay < 0 {
		return nil, fmt.Errorf("redisstore: negative duration (dial timeout %v, connection timeout %v, flush delay %v)", cfg.DialTimeout, cfg.ConnTimeout, cfg.FlushDelay)
	}
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	dial := cmp.Or(cfg.DialTimeout, defaultDialTimeout)
	s.wrap = cfg.Wrap
	s.opt = rueidis.ClientOption{
		InitAddress: cfg.Addrs,
		Username:    cfg.Username,
		Password:    cfg.Password,
		TLSConfig:   cfg.TLS,
		ClientName:  "sluice",
		// Bounds the TCP connect and, in wires.dial, the TLS
		// handshake; rueidis bounds HELLO/AUTH by it too.
		Dialer: net.Dialer{Timeout: dial},
		// Watch each connection's bytes, for Stalled.
		DialCtxFn: s.wires.dial,
		// Every read of a limit is also a write, so client-side caching
		// would never hit; it only costs memory and tracking messages.
		DisableCache: true,
		// Pipeline even a lone command: in rueidis's synchronous mode a
		// deadline that fires closes the connection, and under a 5 ms
		// deadline that turns one slow reply into a reconnect storm.
		AlwaysPipelining: true,
		ConnWriteTimeout: cmp.Or(cfg.ConnTimeout, defaultConnTimeout),
		ClusterOption:    rueidis.ClusterOption{MaxMovedRedirections: maxRedirects},
	}
	s.opt.MaxFlushDelay = cfg.FlushDelay
	if cfg.MasterSet != "" {
		s.opt.Sentinel = rueidis.SentinelOption{MasterSet: cfg.MasterSet, Dialer: net.Dialer{Timeout: dial},
			ClientName: "sluice", TopologyRefreshInterval: max(s.refresh, 0)}
	}
	s.seeds = append([]string(nil), cfg.Addrs...)
	s.direct = !cfg.RueidisTakes && cfg.FlushDelay == 0 && cfg.MasterSet == ""
	s.pipeCtx, s.stopPipes = context.WithCancel(context.Background())
	s.pipes.Store(&map[string]*pipe{})
	s.attempt = 3*dial + cmp.Or(cfg.ConnTimeout, defaultConnTimeout)
	s.topo.Store(unknownTopology(s.unknownNode()))
	if err := s.connect(ctx); err != nil {
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return nil, err
		}
		if err := s.tlsRefused(); err != nil {
			return nil, err
		}
		// Unreachable is an outage, not a mistake: the store starts
		// without Redis, its takes fail fast (ErrUnavailable) so that the
		// guard above limits locally, and it keeps connecting in the
		// background until Redis answers.
		s.log.Warn("redis unreachable at start; connecting in the background", "addrs", cfg.Addrs, "error", err)
		bg, cancel := context.WithCancel(context.Background())
		s.stopConnect, s.connectDone = cancel, make(chan struct{})
		go s.reconnect(bg)
	}
	return s, nil
}

// NewWithClient returns a Store that takes through client, a connected
// rueidis client that the caller made and owns: the store never closes it,
// so one client can serve sluice and the caller's own commands, and be
// instrumented as the caller likes (rueidishook, rueidisotel). Close stops
// the store's own work and leaves the client open; close the client after
// the store.
//
// The connection settings are the client's, so cfg's Addrs, MasterSet,
// Username, Password, TLS, DialTimeout, ConnTimeout and FlushDelay must be
// zero; Prefix, Now, Logger and RefreshInterval apply. New's client
// disables client-side caching (every read here is also a write) and
// always pipelines; a client built otherwise works, less well. Stalled
// watches only the connections of New's own client, so with the caller's
// it always reports false, and a guard above judges nodes by their
// answers alone. NewWithClient reads the slot map and loads the take's
// code before it returns, and fails if that fails or ctx ends.
func NewWithClient(ctx context.Context, client rueidis.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: NewWithClient: client is nil")
	}
	if len(cfg.Addrs) > 0 || cfg.MasterSet != "" || cfg.Username != "" || cfg.Password != "" || cfg.TLS != nil ||
		cfg.DialTimeout != 0 || cfg.ConnTimeout != 0 || cfg.FlushDelay != 0 {
		return nil, errors.New("redisstore: NewWithClient: addresses, master set, credentials, TLS, timeouts and flush delay are the client's: leave them zero in Config")
	}
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	s.borrowed = true
	for addr := range client.Nodes() {
		s.seeds = append(s.seeds, addr)
	}
	slices.Sort(s.seeds)
	if len(s.seeds) == 0 {
		return nil, errors.New("redisstore: NewWithClient: the client knows no node")
	}
	if err := s.serve(ctx, &link{client: client}); err != nil {
		return nil, err
	}
	return s, nil
}

// newStore returns a Store for cfg with no client yet, having checked
// what every constructor checks.
func newStore(cfg Config) (*Store, error) {
	prefix := cmp.Or(cfg.Prefix, defaultPrefix)
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q holds a brace, which would move every key's hash tag", prefix)
	}
	code, err := assemble()
	if err != nil {
		return nil, err
	}
	s := &Store{
		code: code,
		// Not NewLuaScriptRetryable: a take is not idempotent, so a script
		// whose reply was lost must not run again.
		script:  rueidis.NewLuaScript(code.script),
		prefix:  prefix,
		now:     cfg.Now,
		log:     cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		wires:   &wires{},
		refresh: cmp.Or(cfg.RefreshInterval, defaultRefresh),
	}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// RedisKey returns the Redis key that holds limit l's state for request
// key: <prefix>{<encoded key>}:<l.BucketID()>. The store never needs it from
// outside; operators and tests use it to look at a bucket (GET, PTTL).
func (s *Store) RedisKey(key string, l *limit.Limit) string {
	return string(appendKey(nil, s.prefix, key, l))
}

// Close stops the store's slot map refreshes and closes its connections,
// waiting for Takes in flight and for a reload of the take's code under
// way. Takes after Close fail with ErrUnavailable. Closing twice does
// nothing more.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.stopConnect != nil {
			s.stopConnect()
			<-s.connectDone
		}
		s.mu.Lock()
		stop, done := s.stopRefresh, s.refreshDone
		s.stopRefresh = nil
		s.mu.Unlock()
		if stop != nil {
			stop()
			<-done
		}
		if s.stopPipes != nil {
			s.stopPipes()
			s.pipesRun.Wait()
		}
		s.reloadMu.Lock()
		s.stopping = true
		s.reloadMu.Unlock()
		s.reloads.Wait()
		if l := s.link.Load(); l != nil && !s.borrowed {
			l.client.Close()
		}
	})
}

// Cluster reports whether the store talks to a Redis Cluster. Before the
// store has connected it cannot tell, and reports false.
func (s *Store) Cluster() bool {
	l := s.link.Load()
	return l != nil && l.client.Mode() == rueidis.ClientModeCluster
}

// scratch is the memory one Take builds its command in. Pooled, it makes
// the keys and arguments of a Take cost one allocation: all their bytes
// go into buf, become one string, and keys and args slice it.
type scratch struct {
	buf  []byte
	ends []int // end offset in buf of each key, then of each numeric argument
	keys []string
	args []string
	outs []limit.Outcome
	ints []int64 // an array reply's integers, from rueidis
}

// build fills keys and args for a take of cost to want tokens (see
// lua/take.lua for the layout): a key per limit, then one argument,
// "<cost> <want>[ <refused>];<limit>;<limit>...", a shadow limit ending in
// " shadow" and one that counts refusals in " refusals", and now in ms
// when it is not 0 (a test clock). A want of 0 builds a settle of the
// cost instead: "settle <cost>;<limit>..."
func (sc *scratch) build(prefix string, req *limit.Request, now, want int64) {
	b, ends := sc.buf[:0], sc.ends[:0]
	for i := range req.Limits {
		b = appendKey(b, prefix, req.Key, &req.Limits[i])
		ends = append(ends, len(b))
	}
	if want == 0 {
		b = append(b, "settle "...)
		b = strconv.AppendInt(b, req.EffectiveCost(), 10)
	} else {
		b = strconv.AppendInt(b, req.EffectiveCost(), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, want, 10)
		if req.Refused > 0 {
			b = append(b, ' ')
			b = strconv.AppendInt(b, req.Refused, 10)
		}
	}
	for i := range req.Limits {
		l := &req.Limits[i]
		b = append(b, ';')
		b = append(b, l.Alg()...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, l.Count, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, l.PeriodMillis(), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, l.EffectiveBurst(), 10)
		if l.Shadow {
			b = append(b, " shadow"...)
		} else if l.CountRefusals {
			b = append(b, " refusals"...)
		}
	}
	ends = append(ends, len(b))
	if now != 0 {
		b = strconv.AppendInt(b, now, 10)
		ends = append(ends, len(b))
	}
	all := string(b)
	n := len(req.Limits)
	keys, args := sc.keys[:0], sc.args[:0]
	start := 0
	for _, end := range ends[:n] {
		keys = append(keys, all[start:end])
		start = end
	}
	for _, end := range ends[n:] {
		args = append(args, all[start:end])
		start = end
	}
	sc.buf, sc.ends, sc.keys, sc.args = b, ends, keys, args
}

// maxPooledBuf is the largest command buffer kept for reuse: one request
// with a huge key should not pin its buffer for good.
const maxPooledBuf = 16 << 10

func (s *Store) putScratch(sc *scratch) {
	if cap(sc.buf) > maxPooledBuf {
		return
	}
	// Drop the string references so the pool does not keep them alive.
	clear(sc.keys)
	clear(sc.args)
	s.scratch.Put(sc)
}

// Take implements limit.Store: one call on the node that holds the
// request key's slot. Errors wrap ErrTimeout, ErrUnavailable or ErrReply.
// req must be valid (limit.Request.Validate), as the limit.Store contract
// says: the store does not check it again. It refuses only what would make
// it fail or corrupt a state in Redis, with an error matching
// limit.ErrInvalid: a request without limits or of a negative cost, or
// (from the script, once
// per distinct limit) a rate, period or burst below 1 or too large to
// count exactly. A caller above no validating layer (pipeline.Pipeline
// validates) calls limit.Request.Validate first.
func (s *Store) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	_, d, err := s.take(ctx, req, 0)
	return d, err
}

// TakeUpTo implements limit.Granter: it takes as many tokens as every
// limit of req can spare, at least req's cost and at most want, in the
// same one call as Take, and reports how many it took. A token lease draws
// its batches with it: the tokens leave Redis before any gateway spends
// them. When granted is positive, d describes the limits after the take;
// when it is zero, d is the refusal Take would have given req. A want below
// the cost means the cost. Errors are Take's.
func (s *Store) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (granted int64, d limit.Decision, err error) {
	if want < 1 {
		return 0, limit.Decision{}, fmt.Errorf("redisstore: want %d tokens: must be at least 1", want)
	}
	return s.take(ctx, req, want)
}

// take is Take and TakeUpTo: a take of req's cost, or of up to want tokens
// when want is larger.
func (s *Store) take(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	if len(req.Limits) == 0 || req.Cost < 0 {
		// The one check of a request the store takes as valid: a call
		// needs a key to route by, and a grant a cost to start from. What
		// would corrupt a state (a zero rate or period, a count past 2^53)
		// the script refuses once per distinct limit (lua/take.lua, spec).
		return 0, limit.Decision{}, fmt.Errorf("redisstore: request of cost %d and %d limits cannot be taken (limit.Request.Validate): %w", req.Cost, len(req.Limits), limit.ErrInvalid)
	}
	if s.closed.Load() {
		return 0, limit.Decision{}, errClosed
	}
	l := s.link.Load()
	if l == nil {
		return 0, limit.Decision{}, s.errNotConnected()
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
	sc.build(s.prefix, req, now, want)
	granted, err := s.call(ctx, l, sc, req, cost, want)
	if err != nil {
		return 0, limit.Decision{}, err
	}
	d := limit.DecideEach(sc.outs, req.Limits, cost)
	d.Source = limit.FromRedis
	return granted, d, nil
}

// call runs the take built in sc, on the node's pipe when it can (see
// direct.go), else through rueidis, and decodes its reply into sc.outs.
func (s *Store) call(ctx context.Context, l *link, sc *scratch, req *limit.Request, cost, want int64) (int64, error) {
	fail := func(class, err error) error {
		return fmt.Errorf("redisstore: take %d to %d tokens in slot %d: %w: %w", cost, want, Slot(req.Key), class, err)
	}
	if p := s.pipeOf(l, req.Key); p != nil {
		c, sent := p.take(ctx, s.code.function, sc)
		switch {
		case !sent:
		case c == nil:
			err := ctx.Err() // as rueidis answers
			return 0, fail(classify(err), err)
		default:
			defer release(c)
			if divert, stale := divert(c.r.err); divert {
				if stale {
					s.refreshSoon()
				}
				break
			}
			if c.r.err != nil {
				return 0, fail(classify(c.r.err), c.r.err)
			}
			granted, err := decodeReply(sc, c.r.kind != '*', c.r.str, c.r.ints, c.r.bad, req, cost, want)
			if err != nil {
				return 0, fail(ErrReply, err)
			}
			return granted, nil
		}
	}
	resp := s.exec(ctx, l, sc.keys, sc.args)
	if err := resp.Error(); err != nil {
		return 0, fail(classify(err), err)
	}
	msg, err := resp.ToMessage()
	if err == nil {
		var granted int64
		if msg.IsString() {
			states, _ := msg.ToString()
			granted, err = decodeReply(sc, true, states, nil, false, req, cost, want)
		} else {
			var msgs []rueidis.RedisMessage
			if msgs, err = msg.ToArray(); err == nil {
				bad := false
				sc.ints = sc.ints[:0]
				for i := range msgs {
					v, err := msgs[i].ToInt64()
					bad = bad || err != nil
					sc.ints = append(sc.ints, v)
				}
				granted, err = decodeReply(sc, false, "", sc.ints, bad, req, cost, want)
			}
		}
		if err == nil {
			return granted, nil
		}
	}
	return 0, fail(ErrReply, err)
}

// decodeReply checks and converts a take's reply, a string of states or an
// array of integers (bad when it held anything else), into sc.outs, and
// returns the tokens granted.
func decodeReply[B string | []byte](sc *scratch, isString bool, states B, ints []int64, bad bool, req *limit.Request, cost, want int64) (int64, error) {
	var granted int64
	var err error
	switch {
	case !isString:
		if bad {
			return 0, errors.New("reply array holds an element that is not an integer")
		}
		granted, sc.outs, err = parseReply(sc.outs[:0], ints, req.Limits, cost, want)
	case len(req.Limits) == 1 && req.Limits[0].Alg() != limit.TokenBucket:
		granted, sc.outs, err = parseOne(sc.outs[:0], states, cost)
	default:
		granted = want
		sc.outs, err = parseStates(sc.outs[:0], states, req.Limits)
	}
	return granted, err
}

// stateSize is the length of a token bucket's binary state: three
// little-endian float64s, the credits left, the ms the value was written to
// live and the ms of the last take (lua/alg_token_bucket.lua).
const stateSize = 24

// parseStates converts the reply of a take that gave every limit, all
// token buckets, the tokens it wanted: the states just written, one per
// limit in order (see lua/take.lua). A limit's outcome follows from the
// credits it has left, as limit.Evaluate computes it: remaining is whole
// tokens, reset the ms until the bucket is full again.
func parseStates[B string | []byte](outs []limit.Outcome, states B, limits []limit.Limit) ([]limit.Outcome, error) {
	if len(states) != stateSize*len(limits) {
		return outs, fmt.Errorf("reply of %d bytes, want %d token-bucket states of %d bytes for %d limits", len(states), len(limits), stateSize, len(limits))
	}
	for i := range limits {
		l := &limits[i]
		if l.Alg() != limit.TokenBucket {
			return outs, fmt.Errorf("reply holds states, but limit %d is %s, not a token bucket", i, l.Alg())
		}
		// The conversion stays on the stack: Uint64 does not keep its slice.
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(states[stateSize*i : stateSize*i+8])))
		period := l.PeriodMillis()
		capacity := l.EffectiveBurst() * period
		left := int64(f)
		if float64(left) != f || left < 0 || left > capacity {
			return outs, fmt.Errorf("limit %d: %v credits left, want an integer from 0 to %d", i, f, capacity)
		}
		outs = append(outs, limit.Outcome{Allowed: true, Remaining: left / period,
			ResetAfter: (capacity - left + l.Count - 1) / l.Count})
	}
	return outs, nil
}

// oneSize is the length of the reply to a take of one limit that is not a
// token bucket at its cost: allowed, remaining, retry and reset, four
// little-endian float64s (lua/take.lua).
const oneSize = 32

// parseOne checks and converts the reply to a take of cost from one limit
// that is not a token bucket (see lua/take.lua), as parseReply does the
// array form. It returns the tokens granted: cost when allowed.
func parseOne[B string | []byte](outs []limit.Outcome, reply B, cost int64) (int64, []limit.Outcome, error) {
	if len(reply) != oneSize {
		return 0, outs, fmt.Errorf("reply of %d bytes, want %d for one limit", len(reply), oneSize)
	}
	var v [4]int64
	for i := range v {
		// The conversion stays on the stack: Uint64 does not keep its slice.
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(reply[8*i : 8*i+8])))
		v[i] = int64(f)
		if float64(v[i]) != f || f < -1 || f >= 1<<53 {
			return 0, outs, fmt.Errorf("reply value %d is %v, want an integer from -1 to 2^53", i, f)
		}
	}
	o, err := outcome(0, v)
	if err != nil {
		return 0, outs, err
	}
	if !o.Allowed {
		cost = 0
	}
	return cost, append(outs, o), nil
}

// outcome checks limit i's answer in a reply, allowed (1/0), remaining,
// retry and reset ms, and converts it.
func outcome(i int, v [4]int64) (limit.Outcome, error) {
	allowed, remaining, retry, reset := v[0], v[1], v[2], v[3]
	switch {
	case allowed != 0 && allowed != 1:
		return limit.Outcome{}, fmt.Errorf("limit %d: allowed is %d, want 0 or 1", i, allowed)
	case remaining < 0 || reset < 0:
		return limit.Outcome{}, fmt.Errorf("limit %d: remaining %d and reset %d ms must not be negative", i, remaining, reset)
	case allowed == 1 && retry != 0, allowed == 0 && retry < -1:
		return limit.Outcome{}, fmt.Errorf("limit %d: allowed %d with retry %d ms", i, allowed, retry)
	}
	return limit.Outcome{Allowed: allowed == 1, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}, nil
}

// parseReply checks the reply of a take of cost to want tokens for limits
// (see lua/take.lua) and converts it, so that limit.DecideRequest combines
// it as it does for every store. It returns the tokens granted, which the
// enforced limits alone decide.
func parseReply(outs []limit.Outcome, ints []int64, limits []limit.Limit, cost, want int64) (int64, []limit.Outcome, error) {
	n := len(limits)
	if len(ints) != 1+4*n {
		return 0, outs, fmt.Errorf("reply has %d elements, want %d for %d limits", len(ints), 1+4*n, n)
	}
	granted := ints[0]
	allowedAll := true
	var v [4]int64
	for i := range n {
		copy(v[:], ints[1+4*i:])
		o, err := outcome(i, v)
		if err != nil {
			return 0, outs, err
		}
		allowedAll = allowedAll && (o.Allowed || limits[i].Shadow)
		outs = append(outs, o)
	}
	if allowedAll && (granted < cost || granted > want) || !allowedAll && granted != 0 {
		return 0, outs, fmt.Errorf("reply grants %d tokens (all enforced limits allowed: %v) for a take of %d to %d", granted, allowedAll, cost, want)
	}
	return granted, outs, nil
}

// errClosed is what a closed store answers. The client would answer with
// whatever its teardown left behind, "context canceled" among them, which
// would read as the caller giving up.
var errClosed = fmt.Errorf("redisstore: store is closed: %w", ErrUnavailable)

// classify maps an error from the client to ErrTimeout, ErrUnavailable or
// ErrReply, or to context.Canceled for a caller that gave up. A Redis error
// reply is ErrReply unless it says the node cannot serve now: WRONGTYPE (a
// foreign value under one of the store's keys), a script error or a
// malformed state are Redis answering, not an outage.
// nodeWideErrors start the error replies that say the node cannot serve
// any key now, not that one key's data is wrong: a failover or a read-only
// replica, a script hogging it (BUSY), memory or disk trouble (OOM,
// MISCONF), credentials or permissions (NOAUTH, WRONGPASS, NOPERM), too few
// replicas (NOREPLICAS). They are outages of the node, so the guard limits
// its keys locally rather than failing each request alone.
var nodeWideErrors = []string{"MASTERDOWN", "READONLY", "BUSY", "OOM", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM", "NOREPLICAS"}

func nodeWide(msg string) bool {
	for _, p := range nodeWideErrors {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func classify(err error) error {
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return ErrTimeout
	}
	var msg string
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg = re.Error()
	} else if re := redisError(""); errors.As(err, &re) {
		msg = string(re) // from a pipe (direct.go)
	}
	if msg != "" {
		if strings.Contains(msg, "sluice: invalid limit") {
			return limit.ErrInvalid // the script's guard (lua/take.lua, spec)
		}
		for _, p := range []string{"REDIRECT", "CLUSTERDOWN", "TRYAGAIN", "LOADING"} {
			if strings.HasPrefix(msg, p) {
				return ErrUnavailable
			}
		}
		if nodeWide(msg) {
			return ErrUnavailable
		}
		return ErrReply
	}
	// Anything else is the transport: refused, reset, closed, no address.
	return ErrUnavailable
}
