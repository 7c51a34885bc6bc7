package console

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/sluice-rl/sluice/admin"
)

// apiClient calls the admin API in-process: the same handler, the same
// checks of the token, the same audit rows as a call over the network.
type apiClient struct{ h http.Handler }

// base is the BaseURL of the in-process client; its host is never dialled.
const base = "http://rules.console.invalid"

// client returns an admin.Client that calls the API as s's token.
func (a *apiClient) client(s *session) *admin.Client {
	return &admin.Client{BaseURL: base, Token: s.secret, HTTPClient: &http.Client{Transport: a}}
}

// RoundTrip serves req with the API's handler, into a recorder that keeps
// the answer as a server would send it. (net/http/httptest's recorder
// would do, but it would link httptest, and the test certificate and key
// it carries, into the sluice binary.)
func (a *apiClient) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}}
	a.h.ServeHTTP(rec, req)
	if req.Body != nil {
		req.Body.Close()
	}
	rec.WriteHeader(http.StatusOK) // if the handler wrote nothing
	return &http.Response{
		Status:        strconv.Itoa(rec.status) + " " + http.StatusText(rec.status),
		StatusCode:    rec.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.sent,
		Body:          io.NopCloser(&rec.body),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
	}, nil
}

// recorder is the http.ResponseWriter of an in-process call: the status,
// the header as it was when the status was written, and the body.
type recorder struct {
	header, sent http.Header
	status       int
	body         bytes.Buffer
}

// Header returns the header to be sent.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records the first status written, and the header then.
func (r *recorder) WriteHeader(status int) {
	if r.status != 0 {
		return
	}
	r.status = status
	r.sent = r.header.Clone()
}

// Write appends b to the body, writing a 200 first if no status was.
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// fail renders err as the error page, with the status the API answered
// (403 for a read token's write, 400 for a bad field) or 500.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, back string, err error) {
	ev := errorView{Status: http.StatusInternalServerError, Message: err.Error(), Back: back}
	if ae, ok := errors.AsType[*admin.Error](err); ok {
		ev.Status, ev.Message, ev.Field = ae.Status, ae.Message, ae.Field
	}
	if ev.Status == http.StatusUnauthorized && s != nil {
		// The token was revoked since login: the session is worth nothing.
		c.sessions.end(s)
		ev.Back = Prefix + "/login"
	}
	if ev.Status >= 500 {
		c.cfg.Logger.Error("console: admin API call failed", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, ev.Status, "error", s, ev)
}
