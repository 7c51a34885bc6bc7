// Package longpoll is the client side that the gateway's subscriptions
// share, rules from the rules service (internal/rulesync) and region
// shares from the quota balancer (internal/sharesync): a loop that polls
// again at once after an answer and backs off after a failure, and HTTP
// calls with one rule for success.
package longpoll

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of Backoff's fields.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Backoff bounds the wait between failed polls, which doubles from Min to
// Max with each failure in a row. Zero fields mean DefaultMinBackoff and
// DefaultMaxBackoff.
type Backoff struct {
	Min, Max time.Duration
}

// withDefaults returns b with its zero fields set, and whether its
// bounds are in order.
func (b Backoff) withDefaults() (Backoff, error) {
	b.Min, b.Max = cmp.Or(b.Min, DefaultMinBackoff), cmp.Or(b.Max, DefaultMaxBackoff)
	if b.Min < 0 || b.Max < b.Min {
		return b, fmt.Errorf("backoff from %v to %v: want MinBackoff positive and MaxBackoff not below it", b.Min, b.Max)
	}
	return b, nil
}

// Check returns an error if b's bounds are negative or out of order;
// constructors call it so that Loop never meets a bad Backoff.
func (b Backoff) Check() error {
	_, err := b.withDefaults()
	return err
}

// Loop calls poll until ctx is done. After a poll that returns nil it
// polls again at once: the server holds a poll until it has news. After
// one that fails it calls failed with the error and the wait (for the
// log), then waits: Min after the first failure, doubling up to Max with
// each failure in a row, and drawn between half and all of that so that a
// fleet that lost its server does not come back in step. A poll that fails
// because ctx is done ends the loop without a call to failed. A Backoff
// that Check refuses waits its defaults.
func (b Backoff) Loop(ctx context.Context, poll func(context.Context) error, failed func(err error, wait time.Duration)) {
	b, err := b.withDefaults()
	if err != nil {
		b = Backoff{DefaultMinBackoff, DefaultMaxBackoff}
	}
	backoff := b.Min
	for ctx.Err() == nil {
		err := poll(ctx)
		if err == nil {
			backoff = b.Min
			continue
		}
		if ctx.Err() != nil {
			return
		}
		d := backoff/2 + rand.N(backoff/2+1)
		failed(err, d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, b.Max)
	}
}

// ParseURL parses the base URL of a server: http or https, with a host;
// a trailing slash is dropped.
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q: want an http or https URL with a host", s)
	}
	return u, nil
}

// StatusError is an answer that is not a success: its status, its
// headers, and the server's message (the "error" of a JSON body), if any.
type StatusError struct {
	Status  string // such as "503 Service Unavailable"
	Code    int
	Header  http.Header
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return e.Status
	}
	return e.Status + ": " + e.Message
}

// Do sends req with token as its bearer token (none if empty) and returns
// the response if it is a success: any 2xx, or 304 Not Modified to a poll.
// The caller then closes its body. Any other answer is a *StatusError,
// with the body read (4 KB at most) and closed; a request that got no
// answer is the client's error.
func Do(c *http.Client, req *http.Request, token string) (*http.Response, error) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	defer resp.Body.Close()
	se := &StatusError{Status: resp.Status, Code: resp.StatusCode, Header: resp.Header}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		se.Message = e.Error
	}
	return nil, se
}

// Post sends body as JSON to u with Do's success rule, bounded by
// timeout, and discards the answer's body.
func Post(ctx context.Context, c *http.Client, u, token string, body any, timeout time.Duration) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := Do(c, req, token)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return resp.Body.Close()
}
