package console

import (
	"errors"
	"net/http"
	"net/http/httptest"

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

// RoundTrip serves req with the API's handler. httptest's recorder is
// the ResponseWriter: it keeps the answer as a server would send it.
func (a *apiClient) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	if req.Body != nil {
		req.Body.Close()
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
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
