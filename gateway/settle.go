package gateway

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// Settler settles a request's cost after its response, when the cost taken
// before was an estimate: delta is the true cost less the estimate. A
// positive delta is taken whatever the limits hold, leaving debt; a
// negative one is given back, never above a limit's burst.
// memstore.Store, redisstore.Store and pipeline.Pipeline implement it. It
// is called once per response of an endpoint with a cost header, after
// the response's body, from the request's goroutine; it must not keep req.
type Settler interface {
	Settle(ctx context.Context, req *limit.Request, delta int64) (memstore.Settled, error)
}

// maxCost bounds the cost a response may report: 2^40 tokens is no real
// request's, and keeps every sum far from overflowing.
const maxCost = 1 << 40

// settleTimeout bounds a settle without a Config.Timeout: the response is
// sent, and its trailers wait for the settle.
const settleTimeout = 250 * time.Millisecond

// pending is what a request carries from its check to its concurrency
// slots (hold) and, to an endpoint with a cost header, to its settle.
type pending struct {
	header   string // the endpoint's cost header; "" for none
	key      string // the store key; "" when the estimate was not taken
	limits   []limit.Limit
	estimate int64
	cl       call
	conc     []rules.ConcurrencyLimit // the request's concurrency limits
}

// costWriter strips the cost header from the response, as a header or a
// trailer, and keeps its value for the settle.
type costWriter struct {
	http.ResponseWriter
	name  string // canonical
	value string
	found bool
	wrote bool
}

// Unwrap lets http.ResponseController reach the server's writer (Flush for
// streamed responses).
func (c *costWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *costWriter) WriteHeader(code int) {
	if !c.wrote && code >= 200 {
		c.wrote = true
		c.take()
		// Not announced as a trailer either: the server sends only the
		// trailers the headers announced.
		h := c.Header()
		if vs := h["Trailer"]; len(vs) > 0 {
			var keep []string
			for _, v := range vs {
				for _, f := range strings.Split(v, ",") {
					if f = strings.TrimSpace(f); f != "" && textproto.CanonicalMIMEHeaderKey(f) != c.name {
						keep = append(keep, f)
					}
				}
			}
			if len(keep) == 0 {
				h.Del("Trailer")
			} else {
				h["Trailer"] = []string{strings.Join(keep, ", ")}
			}
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *costWriter) Write(b []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// Flush sends what the handler wrote so far, for streamed responses.
func (c *costWriter) Flush() {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(c.ResponseWriter).Flush()
}

// take reads and removes the cost header, or a trailer of that name set
// after the body (announced, or with http.TrailerPrefix). The last one
// seen wins: a trailer corrects the header.
func (c *costWriter) take() {
	h := c.Header()
	for _, k := range [2]string{c.name, http.TrailerPrefix + c.name} {
		if vs, ok := h[k]; ok {
			if len(vs) > 0 {
				c.value, c.found = vs[len(vs)-1], true
			}
			delete(h, k)
		}
	}
}

// serveAndSettle serves next with the cost header stripped from its
// response, then settles the request's cost with the one it reported.
func (l *Limiter) serveAndSettle(w http.ResponseWriter, r *http.Request, next http.Handler, p *pending) {
	cw := &costWriter{ResponseWriter: w, name: textproto.CanonicalMIMEHeaderKey(p.header)}
	next.ServeHTTP(cw, r)
	cw.take() // trailers, set after the body
	if p.key == "" || l.settler == nil {
		return
	}
	cost, err := strconv.ParseInt(strings.TrimSpace(cw.value), 10, 64)
	if !cw.found || err != nil || cost < 0 || cost > maxCost {
		l.metrics.settled("missing")
		if cw.found {
			l.logDecision(p.cl, slog.LevelWarn, "cost header is not a cost; the estimate stands", logLine{outcome: "settle",
				err: fmt.Errorf("cost header %s holds %q, not a whole number of tokens from 0 to 2^40", p.header, cw.value)})
		}
		return
	}
	delta := cost - p.estimate
	if delta == 0 {
		l.metrics.settled("exact")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), cmp.Or(l.timeout, settleTimeout))
	defer cancel()
	st, err := l.settler.Settle(ctx, &limit.Request{Key: p.key, Cost: p.estimate, Limits: p.limits}, delta)
	switch {
	case err != nil:
		l.metrics.settled("error")
		l.metrics.storeError()
		l.logDecision(p.cl, slog.LevelWarn, "settle failed; the estimate stands", logLine{outcome: "settle", err: err})
	case delta < 0:
		l.metrics.settled("gave_back")
	case st.Debt > 0:
		l.metrics.settled("debt")
		l.log.LogAttrs(r.Context(), slog.LevelInfo, "settled into debt: the key waits until it has refilled",
			slog.String("key", keyhash.Of(p.key)), slog.String("endpoint", p.cl.endpoint),
			slog.Int64("estimate", p.estimate), slog.Int64("cost", cost), slog.Int64("debt", st.Debt))
	default:
		l.metrics.settled("took")
	}
}
