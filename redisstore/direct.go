package redisstore

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Takes go to each node over a connection of the store's own (a pipe),
// written by the callers themselves, not through rueidis (issue 28). With
// rueidis every take is handed to the connection's writer goroutine and
// its reply back from the reader: two goroutine wake-ups and a write(2) per
// handful of takes. Here the caller appends its FCALL to the pipe's buffer
// and, if no write is under way, yields once to the goroutines ready to
// run and writes the buffer itself, again while more was appended
// meanwhile ("group commit"): at most one write in flight per connection,
// and the takes that arrive during the yield or the write go out together
// in the next, with no timer. One reader goroutine per connection hands each
// reply to its caller in order.
//
// A pipe serves only the take's FCALL on a known node. Anything else goes
// through rueidis, which follows the cluster: a take while the pipe is not
// up, a node the store cannot name, a take run as a script, and a reply
// that says the call ran nothing here (MOVED, ASK, TRYAGAIN, CLUSTERDOWN,
// LOADING, READONLY, Function not found), which rueidis then redirects or
// retries as it does any command. A lost connection fails the takes it
// owed with ErrUnavailable (each may have run) and is dialled again in the
// background. Connections are dialled by wires.dial, so Stalled and Writes
// see them as they see rueidis's.

// pipe is the store's own connection to one node, and what it owes.
type pipe struct {
	s    *Store
	addr string
	// ctx ends when the store closes or the node leaves the slot map
	// (retire): the pipe then dials no more.
	ctx    context.Context
	retire context.CancelFunc
	mu     sync.Mutex
	cur    *pipeConn // the connection up now; nil while down; guarded by mu
	// writers are the writes handed off by callers whose context ended.
	writers sync.WaitGroup
	sent    int64 // takes sent, for tests; guarded by mu
	// dialled is closed when the first dial has ended, connected or not.
	dialled chan struct{}
}

// pipeConn is one connection of a pipe. Its fields are guarded by the
// pipe's mu.
type pipeConn struct {
	net.Conn
	buf, spare []byte  // commands not yet written; the buffer being written
	writing    bool    // a caller is writing buf (see pipe.take)
	owed       []*call // calls whose replies are owed, in the order sent
	head       int     // owed[head] is the next reply's call
	// deadline is the write deadline set last. Only the caller writing
	// (writing true) uses it, as it does the connection.
	deadline time.Time
}

// call is one take's wait for its reply. Pooled: the reader puts back the
// calls whose callers gave up.
type call struct {
	state atomic.Int32  // waiting, gaveUp or answered
	done  chan struct{} // the reply is in r
	r     reply
}

const (
	waiting int32 = iota
	gaveUp
	answered
)

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// reply is a take's reply as read off the wire: a string (the states), an
// array of integers, or an error, Redis's or the connection's.
type reply struct {
	kind byte    // the RESP type: '$' or '+' a string, '*' an array, 0 an error
	str  []byte  // the string
	ints []int64 // the array, when every element is an integer
	bad  bool    // the array holds something else
	err  error
}

// redisError is an error reply from Redis.
type redisError string

func (e redisError) Error() string { return string(e) }

// newRedisError is the error reply msg, without the "ERR " Redis starts
// most with, as rueidis gives it.
func newRedisError(msg []byte) redisError {
	return redisError(strings.TrimPrefix(string(msg), "ERR "))
}

// pipeOf returns the pipe for a take of key through l, starting one if
// there is none; nil if the take goes through rueidis or the store is
// closed.
func (s *Store) pipeOf(l *link, key string) *pipe {
	if !l.direct || !l.functions {
		return nil
	}
	addr := s.Node(key)
	if p := (*s.pipes.Load())[addr]; p != nil || addr == "" {
		return p
	}
	return s.pipeAt(addr)
}

// pipeAt returns the pipe to addr, starting one if there is none; nil if
// the store is closed.
func (s *Store) pipeAt(addr string) *pipe {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := maps.Clone(*s.pipes.Load())
	if p := m[addr]; p != nil || s.closed.Load() {
		return p
	}
	p := &pipe{s: s, addr: addr, dialled: make(chan struct{})}
	p.ctx, p.retire = context.WithCancel(s.pipeCtx)
	m[addr] = p
	s.pipes.Store(&m)
	s.pipesRun.Add(1)
	go p.run()
	return p
}

// keepPipes retires the pipes to nodes not in addrs (a primary that lost
// its slots, a node removed), so that they are not dialled for ever: each
// closes its connection once it owes no replies, and dials no more.
func (s *Store) keepPipes(addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pipes.Load() == nil {
		return // a caller's client (NewWithClient): no pipes
	}
	m := maps.Clone(*s.pipes.Load())
	for addr, p := range m {
		if !slices.Contains(addrs, addr) {
			p.retire()
			delete(m, addr)
		}
	}
	s.pipes.Store(&m)
}

// openPipes starts the pipes to every node of the slot map and waits,
// until ctx ends, for their first dials to end, so that the store serves
// its first takes on them, and no dial of theirs is still under way (which
// Stalled would count) once New returns.
func (s *Store) openPipes(ctx context.Context, l *link) {
	if !l.direct || !l.functions {
		return
	}
	for _, addr := range s.topo.Load().addrs {
		if p := s.pipeAt(addr); p != nil {
			select {
			case <-p.dialled:
			case <-ctx.Done():
				return
			}
		}
	}
}

// refreshSoon reads the slot map again in the background, unless a read
// is under way or the store is closing, after a MOVED or READONLY.
func (s *Store) refreshSoon() {
	s.background(&s.refreshing, func(ctx context.Context) {
		if err := s.RefreshNodes(ctx); err != nil {
			s.log.Warn("redis cluster slot map not refreshed after MOVED or READONLY", "error", err)
		}
	})
}

// take sends the take's FCALL in sc and waits for its reply. ok is false
// when the pipe is down: nothing was sent. c is nil when ctx ended first;
// a take whose ctx has already ended is not sent, as rueidis sends none.
func (p *pipe) take(ctx context.Context, fn string, sc *scratch) (c *call, ok bool) {
	if ctx.Err() != nil {
		return nil, true
	}
	c = calls.Get().(*call)
	p.mu.Lock()
	pc := p.cur
	if pc == nil {
		p.mu.Unlock()
		calls.Put(c)
		return nil, false
	}
	pc.buf = appendFcall(pc.buf, fn, sc.keys, sc.args)
	pc.owed = append(pc.owed, c)
	p.sent++
	if pc.writing {
		p.mu.Unlock()
	} else {
		pc.writing = true
		p.mu.Unlock()
		// Let the goroutines ready to run go first: those that mean to
		// take append meanwhile and share this write. No timer, and no
		// wait when none is ready.
		runtime.Gosched()
		p.write(ctx, pc)
	}
	done := ctx.Done()
	if done == nil {
		// A context that never ends: a plain receive parks and wakes
		// for less than a select over two channels.
		<-c.done
		return c, true
	}
	select {
	case <-c.done:
	case <-done:
		if c.state.CompareAndSwap(waiting, gaveUp) {
			return nil, true
		}
		<-c.done // answered meanwhile
	}
	return c, true
}

// release puts back a call whose reply its caller has read.
func release(c *call) {
	c.state.Store(waiting)
	c.r.err = nil
	calls.Put(c)
}

// write writes pc's buffer until nothing more is waiting in it. A failed
// write closes pc; its reader then fails what pc owes (see run). The
// caller waits on the socket no longer than its ctx (a frozen node with
// full socket buffers blocks a write): once ctx has ended, what is left
// goes on in a goroutine of the pipe's (p.writers), so that the stream
// stays whole and the caller returns.
func (p *pipe) write(ctx context.Context, pc *pipeConn) {
	p.mu.Lock()
	for p.cur == pc && len(pc.buf) > 0 {
		if ctx.Err() != nil {
			p.handOff(pc, nil, nil)
			p.mu.Unlock()
			return
		}
		full := pc.buf
		pc.buf = pc.spare[:0]
		p.mu.Unlock()
		rest, err := p.writeSome(ctx, pc, full)
		p.mu.Lock()
		if len(rest) > 0 && err == nil {
			p.handOff(pc, rest, full)
			p.mu.Unlock()
			return
		}
		pc.spare = full[:0]
		if err != nil && p.cur == pc {
			p.cur = nil
			pc.Close()
		}
	}
	pc.writing = false
	p.mu.Unlock()
}

// writeSome writes b until it is written, a write fails (err), or ctx
// ends (the rest returned, err nil). No write waits longer than the
// connection's write timeout.
//
// A context that ends without a deadline (the guard's, when it judges
// the node silent) cannot move the socket's deadline, so over plain TCP
// a write waits in slices of writeSlice and looks at ctx between them; a
// write cut short by a deadline loses nothing there. Over TLS it does (a
// timed-out write leaves the connection unusable), so a TLS write waits
// for ctx's deadline or the write timeout at once.
func (p *pipe) writeSome(ctx context.Context, pc *pipeConn, b []byte) ([]byte, error) {
	for len(b) > 0 {
		now := time.Now()
		limit := now.Add(p.s.opt.ConnWriteTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(limit) {
			limit = d
		}
		dl := limit
		if p.s.opt.TLSConfig == nil {
			if slice := now.Add(writeSlice); slice.Before(dl) {
				dl = slice
			}
			// The deadline an earlier write set serves again while it
			// ends no later than this write's and not within half a
			// slice: the write still looks at ctx within a slice, a
			// slice cut short costs one more turn of this loop, and
			// most writes skip SetWriteDeadline (a lock and a timer).
			if !pc.deadline.After(dl) && pc.deadline.Sub(now) >= writeSlice/2 {
				dl = pc.deadline
			}
		}
		if !dl.Equal(pc.deadline) {
			pc.SetWriteDeadline(dl)
			pc.deadline = dl
		}
		n, err := pc.Write(b)
		b = b[n:]
		if err != nil {
			switch {
			case !errors.Is(err, os.ErrDeadlineExceeded):
			case ctx.Err() != nil:
				return b, nil
			case dl.Before(limit):
				continue // a slice ended; ctx has not
			}
			return b, err
		}
	}
	return nil, nil
}

// writeSlice is how long a write over plain TCP waits before it looks
// at its caller's context again.
const writeSlice = 5 * time.Millisecond

// handOff has a goroutine of the pipe's write rest (of full) and then the
// buffer, as write would, for a caller whose context ended. p.mu is held;
// pc.writing stays true meanwhile. On TLS a write past its deadline
// leaves the connection unusable: the goroutine's write then fails and
// closes it, and what it owed fails with ErrUnavailable, as it would once
// watch closed it.
func (p *pipe) handOff(pc *pipeConn, rest, full []byte) {
	p.writers.Go(func() {
		ctx := context.Background() // bounded by the write timeout
		if len(rest) > 0 {
			_, err := p.writeSome(ctx, pc, rest)
			p.mu.Lock()
			pc.spare = full[:0]
			if err != nil && p.cur == pc {
				p.cur = nil
				pc.Close()
			}
			p.mu.Unlock()
		}
		p.write(ctx, pc)
	})
}

// broken closes pc and fails every call it owes with err. Only pc's
// reader calls it: it may be reading into the next call's reply.
func (p *pipe) broken(pc *pipeConn, err error) {
	pc.Close()
	p.mu.Lock()
	if p.cur == pc {
		p.cur = nil
	}
	owed := pc.owed[pc.head:]
	pc.owed, pc.head, pc.buf = nil, 0, nil
	p.mu.Unlock()
	err = fmt.Errorf("connection to %s lost: %w", p.addr, err)
	for _, c := range owed {
		c.r.kind, c.r.err = 0, err
		answer(c)
	}
}

// answer hands c its reply, or puts it back if its caller gave up.
func answer(c *call) {
	if c.state.CompareAndSwap(waiting, answered) {
		c.done <- struct{}{}
	} else {
		release(c)
	}
}

// run dials the node, serves replies until the connection fails, and
// dials again, backing off, until the store closes.
func (p *pipe) run() {
	defer p.s.pipesRun.Done()
	wait := firstRetry
	for first := true; ; first = false {
		pc, err := p.dial()
		if err == nil {
			wait = firstRetry
			p.mu.Lock()
			p.cur = pc
			p.mu.Unlock()
		}
		if first {
			close(p.dialled)
		}
		if err == nil {
			err = p.read(pc)
			p.broken(pc, err)
			p.writers.Wait() // pc is closed: their writes fail
		}
		if p.ctx.Err() != nil {
			return
		}
		p.s.log.Debug("redis take connection down", "node", p.addr, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, lastRetry)
	}
}

// dial connects to the node as the store's client does (wires.dial: the
// dialer, TLS), and says HELLO in the client's protocol with its
// credentials.
func (p *pipe) dial() (*pipeConn, error) {
	o := &p.s.opt
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout(&o.Dialer))
	defer cancel()
	conn, err := p.s.wires.dial(ctx, p.addr, &o.Dialer, o.TLSConfig)
	if err != nil {
		return nil, err
	}
	hello := []string{"HELLO", "3"}
	if o.Password != "" {
		hello = append(hello, "AUTH", cmp.Or(o.Username, "default"), o.Password)
	}
	hello = append(hello, "SETNAME", "sluice-takes")
	conn.SetDeadline(time.Now().Add(dialTimeout(&o.Dialer)))
	var r reply
	if _, err = conn.Write(appendCommand(nil, hello...)); err == nil {
		br := bufio.NewReader(conn)
		if err = readReply(br, &r); err == nil {
			err = r.err
		}
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("HELLO: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return &pipeConn{Conn: conn}, nil
}

// read reads replies off pc and hands each to its call, until pc fails.
// A connection that owes replies and has heard nothing for the store's
// connection timeout is closed, as rueidis closes its own.
func (p *pipe) read(pc *pipeConn) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.watch(pc, stop) })
	defer wg.Wait()
	defer close(stop)
	br := bufio.NewReaderSize(pc, 16<<10)
	var r reply // a reply read before its call was known, and its buffers
	var c *call // the next reply's call, when known
	for {
		if c == nil {
			p.mu.Lock()
			if pc.head < len(pc.owed) {
				c = pc.owed[pc.head]
			}
			p.mu.Unlock()
		}
		rp := &r
		if c != nil {
			rp = &c.r
		}
		if err := readReply(br, rp); err != nil {
			return err
		}
		if rp.kind == '>' {
			continue // a push message: no call's reply
		}
		p.mu.Lock()
		if c == nil && pc.head < len(pc.owed) {
			// The call was sent while this reply was awaited.
			c = pc.owed[pc.head]
			c.r, r = r, c.r
		}
		if c == nil {
			p.mu.Unlock()
			return errors.New("a reply nothing was sent for")
		}
		pc.owed[pc.head] = nil
		if pc.head++; pc.head == len(pc.owed) {
			pc.owed, pc.head = pc.owed[:0], 0
		} else if pc.head >= 1024 && pc.head*2 >= len(pc.owed) {
			n := copy(pc.owed, pc.owed[pc.head:])
			clear(pc.owed[n:])
			pc.owed, pc.head = pc.owed[:n], 0
		}
		// The next reply's call, looked up under this lock rather than
		// the next: one lock a reply.
		var next *call
		if pc.head < len(pc.owed) {
			next = pc.owed[pc.head]
		}
		p.mu.Unlock()
		answer(c)
		c = next
	}
}

// watch closes pc when it has owed replies for the connection timeout
// and heard nothing, when the store closes, and when the pipe is retired
// and pc owes nothing, until stop is closed.
func (p *pipe) watch(pc *pipeConn, stop chan struct{}) {
	limit := p.s.opt.ConnWriteTimeout
	t := time.NewTicker(limit / 4)
	defer t.Stop()
	w, _ := pc.Conn.(*wire)
	if tc, ok := pc.Conn.(interface{ NetConn() net.Conn }); ok {
		w, _ = tc.NetConn().(*wire)
	}
	retired := p.ctx.Done()
	for {
		select {
		case <-stop:
			return
		case <-p.s.pipeCtx.Done():
			pc.Close()
			return
		case <-retired:
			retired = nil // from now on, checked at each tick
		case <-t.C:
			if retired == nil && p.takeDown(pc) {
				pc.Close()
				return
			}
			if w != nil {
				if since := w.owedSince.Load(); since != 0 && monotonic()-since >= int64(limit) && !w.heard(w.owedMark.Load()) {
					pc.Close()
				}
			}
		}
	}
}

// takeDown takes pc out of service if it owes no replies and has nothing
// to write, so that a take still holding the retired pipe goes through
// rueidis, and reports whether it did.
func (p *pipe) takeDown(pc *pipeConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc.head < len(pc.owed) || len(pc.buf) > 0 || pc.writing {
		return false
	}
	if p.cur == pc {
		p.cur = nil
	}
	return true
}

// appendFcall appends FCALL fn with keys and args to b, in RESP.
func appendFcall(b []byte, fn string, keys, args []string) []byte {
	b = appendHeader(b, '*', 3+len(keys)+len(args))
	b = appendBulk(b, "FCALL")
	b = appendBulk(b, fn)
	b = appendHeader(b, '$', len(strconv.Itoa(len(keys))))
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	b = append(b, "\r\n"...)
	for _, k := range keys {
		b = appendBulk(b, k)
	}
	for _, a := range args {
		b = appendBulk(b, a)
	}
	return b
}

func appendCommand(b []byte, args ...string) []byte {
	b = appendHeader(b, '*', len(args))
	for _, a := range args {
		b = appendBulk(b, a)
	}
	return b
}

func appendHeader(b []byte, kind byte, n int) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n"...)
}

func appendBulk(b []byte, s string) []byte {
	b = appendHeader(b, '$', len(s))
	b = append(b, s...)
	return append(b, "\r\n"...)
}

// readReply reads one RESP2 or RESP3 reply into r. What a take's reply
// cannot be is read and skipped, r.bad when inside an array.
func readReply(br *bufio.Reader, r *reply) error {
	r.kind, r.str, r.ints, r.bad, r.err = 0, r.str[:0], r.ints[:0], false, nil
	for {
		kind, line, err := readLine(br)
		if err != nil {
			return err
		}
		switch kind {
		case '-':
			r.err = newRedisError(line)
			return nil
		case '+':
			r.kind, r.str = '+', append(r.str, line...)
			return nil
		case '$', '!', '=':
			if r.str, err = readBulk(br, line, r.str); err != nil {
				return err
			}
			if r.kind = '$'; kind == '!' {
				r.kind, r.err = 0, newRedisError(r.str)
			}
			return nil
		case '*':
			n, err := atoi(line)
			if err != nil {
				return err
			}
			r.kind = '*'
			for i := int64(0); i < n; i++ {
				k, l, err := readLine(br)
				if err != nil {
					return err
				}
				if k == '|' { // an attribute, then the element it describes
					if err := skip(br, k, l); err != nil {
						return err
					}
					i--
					continue
				}
				if k != ':' {
					r.bad = true
					if err := skip(br, k, l); err != nil {
						return err
					}
					continue
				}
				v, err := atoi(l)
				if err != nil {
					return err
				}
				r.ints = append(r.ints, v)
			}
			return nil
		case '|': // attributes come before the reply they describe
			if err := skip(br, kind, line); err != nil {
				return err
			}
		default:
			r.kind = kind
			return skip(br, kind, line)
		}
	}
}

// readLine reads a RESP line, returning its type and the rest without
// CRLF. The rest is valid until the next read.
func readLine(br *bufio.Reader) (byte, []byte, error) {
	b, err := br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(b) < 3 || b[len(b)-2] != '\r' {
		return 0, nil, fmt.Errorf("malformed reply line %q", b)
	}
	return b[0], b[1 : len(b)-2], nil
}

// atoi reads a RESP length or integer.
func atoi(b []byte) (int64, error) {
	neg := len(b) > 1 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var n int64
	for _, d := range b {
		if d < '0' || d > '9' || n > (1<<63-1-9)/10 {
			return 0, fmt.Errorf("malformed number %q", b)
		}
		n = n*10 + int64(d-'0')
	}
	if len(b) == 0 {
		return 0, errors.New("empty number")
	}
	if neg {
		n = -n
	}
	return n, nil
}

// readBulk reads the body of a bulk string of length line onto dst.
// The length is the server's word: memory grows with the bytes that
// arrive, never ahead of them by more than a chunk.
func readBulk(br *bufio.Reader, line []byte, dst []byte) ([]byte, error) {
	n64, err := bulkLen(line)
	if err != nil || n64 < 0 {
		return dst, err
	}
	n, start := int(n64), len(dst)
	for left := n + 2; left > 0; {
		k, at := min(left, 64<<10), len(dst)
		dst = slices.Grow(dst, k)[:at+k]
		if _, err := io.ReadFull(br, dst[at:]); err != nil {
			return dst[:at], err
		}
		left -= k
	}
	return dst[:start+n], nil
}

// bulkLen is a bulk string's length, -1 for a null.
func bulkLen(line []byte) (int64, error) {
	n, err := atoi(line)
	if err != nil || n < -1 || n > 512<<20 {
		return 0, fmt.Errorf("malformed bulk length %q", line)
	}
	return n, nil
}

// skip reads past the rest of a reply of type kind whose line was line.
func skip(br *bufio.Reader, kind byte, line []byte) error {
	var n int64
	switch kind {
	case '$', '!', '=':
		n, err := bulkLen(line)
		if err == nil && n >= 0 {
			_, err = br.Discard(int(n) + 2)
		}
		return err
	case '*', '~', '>':
		n, _ = atoi(line)
	case '%', '|':
		n, _ = atoi(line)
		n *= 2
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	default:
		return fmt.Errorf("unknown reply type %q", kind)
	}
	for i := int64(0); i < n; i++ {
		k, l, err := readLine(br)
		if err != nil {
			return err
		}
		if err := skip(br, k, l); err != nil {
			return err
		}
		if k == '|' {
			i-- // an attribute is not one of the aggregate's elements
		}
	}
	return nil
}

// divert reports whether err, a take's error reply on a pipe, says the
// call ran nothing there and rueidis should send it instead, which follows
// redirects and retries as the cluster asks; stale that the slot map is
// (MOVED, or READONLY from a primary failed over to a replica).
func divert(err error) (yes, stale bool) {
	var re redisError
	if !errors.As(err, &re) {
		return false, false
	}
	msg := string(re)
	stale = strings.HasPrefix(msg, "MOVED") || strings.HasPrefix(msg, "READONLY")
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY"} {
		if strings.HasPrefix(msg, p) {
			return true, stale
		}
	}
	return strings.Contains(msg, "Function not found"), false
}
