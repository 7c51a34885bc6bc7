//go:build ignore

// Floor measures what one Redis round trip per HTTP request costs a Go
// HTTP server's CPU, however the client is written (docs/benchmarks.md,
// issue 28, "The floor"). It serves every request with one of:
//
//	mem      a map increment under a mutex: no Redis (the baseline)
//	rueidis  one INCR through rueidis, one pipelined connection
//	direct   one INCR on a connection its callers write (group commit)
//	batch    the same, with at most one batch at Redis at a time: the
//	         reader writes what queued meanwhile once the last batch's
//	         replies are in (the fewest writes possible)
//	park     no Redis: the map increment done by another goroutine
//	         while the handler waits for its answer, so the handler
//	         parks and is woken as on a Redis path, with no I/O
//
// On SIGTERM it prints the writes per request. A throwaway for
// measuring, not a client: any error ends it. scripts/floor/run drives it.
//
//	go run scripts/floor/main.go -mode batch -redis 127.0.0.1:16381
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/redis/rueidis"
)

// writes and reqs count the Redis writes and the requests served.
var writes, reqs atomic.Int64

// call is one request's wait for its reply.
type call struct{ ch chan []byte }

// direct is a pipelined connection its callers write.
type direct struct {
	mu       sync.Mutex
	conn     net.Conn
	buf      []byte
	writing  bool
	pending  []*call // FIFO, guarded by mu
	oneBatch bool
	inflight int // replies owed by the batch on the wire (oneBatch)
	queued   int // commands in buf
	pool     sync.Pool
}

func newDirect(addr string) *direct {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	d := &direct{conn: c}
	d.pool.New = func() any { return &call{ch: make(chan []byte, 1)} }
	go d.read()
	return d
}

func (d *direct) read() {
	r := bufio.NewReaderSize(d.conn, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			log.Fatal(err)
		}
		d.mu.Lock()
		c := d.pending[0]
		d.pending = d.pending[1:]
		var out []byte
		if d.oneBatch {
			d.inflight--
			if d.inflight == 0 && d.queued > 0 {
				out = append([]byte(nil), d.buf...)
				d.buf = d.buf[:0]
				d.inflight, d.queued = d.queued, 0
			}
		}
		d.mu.Unlock()
		c.ch <- line[:0]
		if out != nil {
			writes.Add(1)
			if _, err := d.conn.Write(out); err != nil {
				log.Fatal(err)
			}
		}
	}
}

func (d *direct) do(key string) {
	c := d.pool.Get().(*call)
	d.mu.Lock()
	d.buf = append(d.buf, "*2\r\n$4\r\nINCR\r\n$"...)
	d.buf = strconv.AppendInt(d.buf, int64(len(key)), 10)
	d.buf = append(d.buf, "\r\n"...)
	d.buf = append(d.buf, key...)
	d.buf = append(d.buf, "\r\n"...)
	d.pending = append(d.pending, c)
	if d.oneBatch {
		d.queued++
		var out []byte
		if d.inflight == 0 {
			out = append([]byte(nil), d.buf...)
			d.buf = d.buf[:0]
			d.inflight, d.queued = d.queued, 0
		}
		d.mu.Unlock()
		if out != nil {
			writes.Add(1)
			if _, err := d.conn.Write(out); err != nil {
				log.Fatal(err)
			}
		}
		<-c.ch
		d.pool.Put(c)
		return
	}
	if !d.writing {
		d.writing = true
		var out []byte
		for len(d.buf) > 0 {
			out, d.buf = d.buf, out[:0]
			d.mu.Unlock()
			writes.Add(1)
			if _, err := d.conn.Write(out); err != nil {
				log.Fatal(err)
			}
			d.mu.Lock()
		}
		d.buf = out[:0]
		d.writing = false
	}
	d.mu.Unlock()
	<-c.ch
	d.pool.Put(c)
}

func main() {
	mode := flag.String("mode", "mem", "mem, rueidis, direct, batch or park")
	redis := flag.String("redis", "127.0.0.1:16381", "Redis `address`")
	listen := flag.String("listen", "127.0.0.1:18081", "`address` to serve on")
	flag.Parse()
	var f func(ctx context.Context, key string)
	switch *mode {
	case "mem":
		var mu sync.Mutex
		m := map[string]int{}
		f = func(_ context.Context, key string) { mu.Lock(); m[key]++; mu.Unlock() }
	case "park":
		// One goroutine answers every request, as one reader answers a
		// pipelined connection's callers.
		type ask struct {
			key  string
			done chan struct{}
		}
		asks := make(chan ask, 1024)
		go func() {
			m := map[string]int{}
			for a := range asks {
				m[a.key]++
				a.done <- struct{}{}
			}
		}()
		dones := sync.Pool{New: func() any { return make(chan struct{}, 1) }}
		f = func(_ context.Context, key string) {
			done := dones.Get().(chan struct{})
			asks <- ask{key, done}
			<-done
			dones.Put(done)
		}
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*redis}, PipelineMultiplex: -1, DisableCache: true})
		if err != nil {
			log.Fatal(err)
		}
		f = func(ctx context.Context, key string) { c.Do(ctx, c.B().Incr().Key(key).Build()) }
	case "direct", "batch":
		d := newDirect(*redis)
		d.oneBatch = *mode == "batch"
		f = func(_ context.Context, key string) { d.do(key) }
	default:
		log.Fatalf("-mode %q: want mem, rueidis, direct, batch or park", *mode)
	}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		fmt.Fprintf(os.Stderr, "writes/req=%.2f\n", float64(writes.Load())/float64(max(reqs.Load(), 1)))
		os.Exit(0)
	}()
	log.Fatal(http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		f(r.Context(), r.Header.Get("X-Api-Key")+r.URL.RawQuery)
		w.WriteHeader(200)
	})))
}
