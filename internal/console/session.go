package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// cookieName is the session cookie's name. The __Host- prefix, which would
// pin it to the host, requires Secure, so it is used over TLS only.
const cookieName = "sluice_console"

// session is one person signed in. Its fields are set at login and not
// changed after, but for flash, which sessions.mu guards.
type session struct {
	id      string // the cookie's value
	secret  string // the admin API token; never leaves the server
	Name    string // the token's name, as the audit log shows it
	Write   bool   // whether the token may write: shows the write controls
	CSRF    string // the synchronizer token every write must carry
	expires time.Time
	flash   string // a message for the next page, after a write
}

// sessions holds the sessions of one console, in memory: a session lives
// on the replica that made it. It is safe for concurrent use.
type sessions struct {
	max int
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex // guards byID and the sessions' flash
	byID map[[32]byte]*session
}

func newSessions(max int, ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{max: max, ttl: ttl, now: now, byID: map[[32]byte]*session{}}
}

// randomToken returns 32 random bytes, base64url-encoded.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand's contract since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// start makes a session for a token that authenticated. It drops expired
// sessions, and the one that expires first when the store is full.
func (ss *sessions) start(secret, name string, write bool) *session {
	s := &session{id: randomToken(), secret: secret, Name: name, Write: write, CSRF: randomToken(),
		expires: ss.now().Add(ss.ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	var oldest [32]byte
	var oldestAt time.Time
	for k, o := range ss.byID {
		if !now.Before(o.expires) {
			delete(ss.byID, k)
		} else if oldestAt.IsZero() || o.expires.Before(oldestAt) {
			oldest, oldestAt = k, o.expires
		}
	}
	if len(ss.byID) >= ss.max {
		delete(ss.byID, oldest)
	}
	ss.byID[sha256.Sum256([]byte(s.id))] = s
	return s
}

// find returns the live session of the cookie's ID, or nil. The map is
// keyed by the ID's hash, so a lookup's time does not depend on how much
// of an ID matches.
func (ss *sessions) find(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := sha256.Sum256([]byte(id))
	s := ss.byID[k]
	if s != nil && !ss.now().Before(s.expires) {
		delete(ss.byID, k)
		return nil
	}
	return s
}

func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, sha256.Sum256([]byte(s.id)))
}

func (ss *sessions) setFlash(s *session, msg string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.flash = msg
}

func (ss *sessions) takeFlash(s *session) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := s.flash
	s.flash = ""
	return f
}

func cookieNameFor(r *http.Request) string {
	if r.TLS != nil {
		return "__Host-" + cookieName
	}
	return cookieName
}

// sessionOf returns the request's session, or nil.
func (c *Console) sessionOf(r *http.Request) *session {
	ck, err := r.Cookie(cookieNameFor(r))
	if err != nil || ck.Value == "" {
		return nil
	}
	return c.sessions.find(ck.Value)
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: cookieNameFor(r), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// read wraps a page: without a session it sends the browser to the login
// form.
func (c *Console) read(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.sessionOf(r)
		if s == nil {
			http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
			return
		}
		h(w, r, s)
	}
}

// form wraps a form's action: it needs a session, a request from the
// console's own origin when the browser says where it comes from, and the
// session's CSRF token in the form. Whether the token may write is the
// admin API's to say, on the call the action makes.
func (c *Console) form(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		s := c.sessionOf(r)
		if s == nil {
			c.render(w, r, http.StatusUnauthorized, "error", nil, errorView{Status: http.StatusUnauthorized,
				Message: "you are not signed in, or your session ended", Back: Prefix + "/login"})
			return
		}
		if !sameOrigin(r) {
			c.cfg.Logger.Warn("console: write from another origin refused", "who", s.Name, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
			c.render(w, r, http.StatusForbidden, "error", s, errorView{Status: http.StatusForbidden,
				Message: "this form was posted from another site", Back: Prefix + "/rules"})
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) != 1 {
			c.cfg.Logger.Warn("console: write without the session's CSRF token refused", "who", s.Name, "path", r.URL.Path)
			c.render(w, r, http.StatusForbidden, "error", s, errorView{Status: http.StatusForbidden,
				Message: "the form's CSRF token is missing or stale: reload the page and try again", Back: Prefix + "/rules"})
			return
		}
		h(w, r, s)
	}
}

// sameOrigin reports whether a request's Origin header, when it has one,
// names the host it was sent to. Browsers send it on every POST; its
// absence (an old client, or curl) leaves the CSRF token as the defence.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// loginView is the login page's data.
type loginView struct{ Error string }

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", nil, loginView{})
}

// login starts a session for the posted token. The token arrives in the
// body, never the URL, and is logged by name only.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !sameOrigin(r) {
		c.render(w, r, http.StatusForbidden, "login", nil, loginView{Error: "this form was posted from another site"})
		return
	}
	secret := r.PostFormValue("token")
	name, write, ok := "", false, false
	if secret != "" {
		name, write, ok = c.cfg.Authenticate(secret)
	}
	if !ok {
		c.cfg.Logger.Warn("console: login refused: unknown token, or one that may not use the admin API")
		c.render(w, r, http.StatusUnauthorized, "login", nil, loginView{Error: "unknown token, or one without admin access"})
		return
	}
	if old := c.sessionOf(r); old != nil {
		c.sessions.end(old)
	}
	s := c.sessions.start(secret, name, write)
	c.setCookie(w, r, s.id, int(c.cfg.SessionTTL/time.Second))
	c.cfg.Logger.Info("console: signed in", "who", name, "write", write)
	http.Redirect(w, r, Prefix+"/rules", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.end(s)
	c.setCookie(w, r, "", -1)
	c.cfg.Logger.Info("console: signed out", "who", s.Name)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}
