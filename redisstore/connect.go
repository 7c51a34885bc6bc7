package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// A gateway must come up during a Redis outage (a gateway rescheduled
// then would otherwise stay down for as long as Redis does), and it must
// never hang on a server that does not answer. So:
//
//   - Every step of a connection attempt has a deadline. DialTimeout bounds
//     the TCP connect, the TLS handshake (wires.dial) and HELLO/AUTH
//     (rueidis bounds its handshake commands by the dialer's timeout);
//     ConnTimeout bounds each later reply (PING, CLUSTER SLOTS); and the
//     whole attempt is bounded by attempt, so that nothing rueidis does
//     without a deadline can hold New.
//   - New makes one attempt. If Redis cannot be reached, the store starts
//     unconnected: takes fail at once with ErrUnavailable (the guard counts
//     them as failures, answers them locally, and opens the node's
//     breaker), Node names every key's node as the seeds, one unknown node,
//     and a goroutine (reconnect) tries again, backing off from 100 ms to
//     2 s, until Redis answers; then the store reads the slot map, loads
//     the take's code and serves as if it had connected in New. Once
//     connected, rueidis reconnects on its own after later outages.
//   - A server that refuses the configuration is not an outage: a TLS
//     handshake that fails (rediss:// at a plaintext port, an untrusted
//     certificate) or refused credentials fail New with an error that
//     names the address and the problem.
//
// rueidis has no lazy client: ForceSingleClient would give one that dials
// later, but only for a standalone server, and whether the seeds are a
// cluster is learned by connecting. So the store holds no client until an
// attempt succeeds (link).

// link is the store's client once it has connected, and how takes run on
// it. It does not change once stored.
type link struct {
	client rueidis.Client
	// functions is true when every node loaded code.library, and takes
	// call it with FCALL; false means EVALSHA of script.
	functions bool
	// direct is true when takes go on the store's own connections
	// (direct.go) while they can.
	direct bool
}

// Reconnection backs off from the first delay to the last, doubling.
const (
	firstRetry = 100 * time.Millisecond
	lastRetry  = 2 * time.Second
)

// unknownNode is the name of the one node every key is on before the store
// has read a slot map: the seeds. For a single standalone server it is the
// name the node keeps once connected.
func (s *Store) unknownNode() string { return strings.Join(s.seeds, ",") }

// unknownTopology is a slot map that gives every slot to node.
func unknownTopology(node string) *topology {
	t := &topology{addrs: []string{node}, one: true}
	for i := range t.owner {
		t.owner[i] = 1
	}
	return t
}

// onePipe returns opt with one pipelined connection per node. rueidis's
// default for a standalone server or a Sentinel's primary is up to four
// (two on two CPUs), each with its own writer and reader goroutine and a
// take going to one at random; its cluster client uses one already. Redis
// runs one command at a time whatever the connections, and a take is a few
// dozen bytes each way, so more connections only split the takes that
// arrive while a writer is inside write(2), which one writer sends together
// in its next. BenchmarkFlushDelay measured 0.72-0.74 writes a take against
// 0.93-0.96 at 16 goroutines, 0.48-0.65 against 0.92-0.93 at 64, and less
// CPU a take, with no delay added (docs/redis.md, Connections).
func onePipe(opt rueidis.ClientOption) rueidis.ClientOption {
	opt.PipelineMultiplex = -1 // 2^-1 rounds to one connection
	return opt
}

// errNotConnected is what a take answers before the store has connected.
func (s *Store) errNotConnected() error {
	return fmt.Errorf("redisstore: not connected to %v yet: %w", s.seeds, ErrUnavailable)
}

// connect makes one connection attempt: client, PING, slot map, the take's
// code. On success the store serves from it. Its error wraps
// ErrUnavailable when Redis could not be reached, which is worth trying
// again; ctx's error when ctx ended; anything else is a configuration the
// server refuses.
func (s *Store) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.attempt)
	defer cancel()
	type result struct {
		client rueidis.Client
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(onePipe(s.opt))
		ch <- result{c, err}
	}()
	var (
		c      rueidis.Client
		direct bool
	)
	select {
	case r := <-ch:
		if r.err != nil {
			return s.connectError(r.err)
		}
		c = r.client
		direct = s.direct
		if s.wrap != nil {
			// A Wrap that wraps sees every command, takes included; one
			// that returns the client as it is (a gateway not tracing)
			// leaves takes to the store's own connections.
			w := s.wrap(c)
			direct = direct && w == c
			c = w
		}
	case <-ctx.Done():
		// NewClient's own steps are bounded (see above); this goroutine
		// ends with the attempt and closes what it made.
		go func() {
			if r := <-ch; r.client != nil {
				r.client.Close()
			}
		}()
		if err := context.Cause(ctx); errors.Is(err, context.Canceled) {
			return fmt.Errorf("redisstore: connect to %v: %w", s.seeds, err)
		}
		return fmt.Errorf("redisstore: connect to %v: no answer within %v: %w", s.seeds, s.attempt, ErrUnavailable)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return s.connectError(fmt.Errorf("ping: %w", err))
	}
	if err := s.serve(ctx, &link{client: c, direct: direct}); err != nil {
		c.Close()
		return err
	}
	return nil
}

// serve reads l's slot map, loads the take's code and starts serving from
// l, with the slot map read again every RefreshInterval in a cluster or
// under Sentinel.
func (s *Store) serve(ctx context.Context, l *link) error {
	if err := s.readNodes(ctx, l); err != nil {
		return err
	}
	l.functions = s.preload(ctx, l.client)
	s.openPipes(ctx, l)
	s.link.Store(l)
	if s.refresh > 0 && l.client.Mode() != rueidis.ClientModeStandalone {
		s.mu.Lock()
		if !s.closed.Load() {
			rctx, stop := context.WithCancel(context.Background())
			s.stopRefresh, s.refreshDone = stop, make(chan struct{})
			go s.refreshEvery(rctx, s.refresh, s.refreshDone)
		}
		s.mu.Unlock()
	}
	s.log.Info("redis store connected", "mode", string(l.client.Mode()), "addrs", s.seeds, "prefix", s.prefix)
	return nil
}

// connectError sorts the error of a failed attempt: a TLS handshake the
// server failed or credentials it refused are the configuration's fault;
// anything else is Redis out of reach, and wraps ErrUnavailable.
func (s *Store) connectError(err error) error {
	var te *tlsError
	if errors.As(err, &te) {
		return fmt.Errorf("redisstore: %w", te)
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("redisstore: %v refused the credentials: %w", s.seeds, err)
			}
		}
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("redisstore: connect to %v: %w", s.seeds, err)
	}
	return fmt.Errorf("redisstore: connect to %v: %w: %w", s.seeds, ErrUnavailable, err)
}

// reconnect tries to connect until it succeeds or ctx ends (Close). An
// attempt the server refuses is logged at error, once per kind, and tried
// again: Redis may be reconfigured without restarting the gateway.
func (s *Store) reconnect(ctx context.Context) {
	defer close(s.connectDone)
	wait := firstRetry
	var last string
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := s.connect(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, ErrUnavailable) && err.Error() != last {
			s.log.Error("redis refused the connection; trying again", "error", err)
			last = err.Error()
		}
		wait = min(2*wait, lastRetry)
	}
}

// Connected reports whether the store has connected to Redis (in New, or
// since in the background). A connected store's nodes may still be down
// now: see Down.
func (s *Store) Connected() bool { return s.link.Load() != nil }

// Down reports the Redis nodes that did not answer a PING before ctx
// ended: before the store has connected, the seeds, as one node (Node's
// name for every key then); after, every primary of the slot map it last
// read. Nil means every node answered. It is the readiness check: a
// gateway answers while nodes are down, from its local limits, and says
// so here.
func (s *Store) Down(ctx context.Context) []string {
	l := s.link.Load()
	if l == nil {
		return []string{s.unknownNode()}
	}
	addrs := s.topo.Load().addrs
	var nodes map[string]rueidis.Client
	if s.Cluster() {
		nodes = l.client.Nodes()
	}
	var (
		mu   sync.Mutex
		down []string
		wg   sync.WaitGroup
	)
	for _, addr := range addrs {
		c := l.client
		if nodes != nil {
			if c = nodes[addr]; c == nil {
				down = append(down, addr)
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				mu.Lock()
				down = append(down, addr)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return down
}

// tlsError is a TLS handshake the server failed: a configuration error,
// not an outage.
type tlsError struct {
	addr string
	err  error
}

func (e *tlsError) Error() string { return "TLS handshake with " + e.addr + ": " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// errPlaintext is the problem of a TLS handshake with a plaintext Redis.
var errPlaintext = errors.New("the server answers plaintext Redis, not TLS: rediss:// needs the server's TLS port (tls-port), redis:// its plaintext one")

// handshakeError sorts a failed TLS handshake with addr: a server that
// answers plaintext Redis, or one that spoke TLS and failed it (a bad
// certificate, a protocol it does not speak), is a *tlsError; a server
// that said nothing (timed out, closed, reset) is an outage, err as it is.
func handshakeError(ctx context.Context, addr string, dialer *net.Dialer, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if plaintextRedis(addr, dialer) {
		return &tlsError{addr, errPlaintext}
	}
	var (
		rh    tls.RecordHeaderError
		alert tls.AlertError
		cv    *tls.CertificateVerificationError
		ua    x509.UnknownAuthorityError
		host  x509.HostnameError
		inval x509.CertificateInvalidError
	)
	if errors.As(err, &rh) || errors.As(err, &alert) || errors.As(err, &cv) || errors.As(err, &ua) ||
		errors.As(err, &host) || errors.As(err, &inval) {
		return &tlsError{addr, err}
	}
	return fmt.Errorf("TLS handshake with %s: %w", addr, err)
}

// plaintextRedis reports whether addr answers a plaintext PING as Redis
// does (+PONG, or an error such as -NOAUTH), within the dialer's timeout.
func plaintextRedis(addr string, dialer *net.Dialer) bool {
	c, err := net.DialTimeout("tcp", addr, dialTimeout(dialer))
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dialTimeout(dialer)))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}

// dialTimeout is the dialer's timeout, or the default.
func dialTimeout(dialer *net.Dialer) time.Duration {
	if dialer.Timeout <= 0 {
		return defaultDialTimeout
	}
	return dialer.Timeout
}

// alertWait is how long tlsAlert listens after the handshake for a server
// that ends the session: an alert comes within a round trip.
const alertWait = 500 * time.Millisecond

// tlsAlert completes a TLS handshake with addr and listens, sending
// nothing, for an alert the server ends the session with. It returns the
// handshake's or the read's error: a timeout when the server kept the
// session.
func tlsAlert(addr string, dialer *net.Dialer, cfg *tls.Config) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout(dialer))
	if err != nil {
		return err
	}
	defer c.Close()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(dialTimeout(dialer)))
	if err := tc.Handshake(); err != nil {
		return err
	}
	tc.SetReadDeadline(time.Now().Add(alertWait))
	var b [1]byte
	_, err = tc.Read(b[:])
	return err
}

// tlsRefused looks, when the store's first attempt failed as an outage,
// for a server that ends TLS sessions it does not accept after the
// handshake: under TLS 1.3 a server that requires a client certificate
// says so with an alert after the client's side of the handshake is done,
// so the client sees only its first write reset. Listening after the
// handshake reads the alert. It returns a *tlsError for the first seed that
// sends one.
func (s *Store) tlsRefused() error {
	if s.opt.TLSConfig == nil {
		return nil
	}
	for _, addr := range s.seeds {
		err := tlsAlert(addr, &s.opt.Dialer, s.opt.TLSConfig)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "remote error" {
			return fmt.Errorf("redisstore: %w", &tlsError{addr, err})
		}
	}
	return nil
}
