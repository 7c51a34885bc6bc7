// Package console is the rules service's operator console: server-rendered
// HTML pages under /ui for the people who change limits and answer
// incidents. It shows the rules and their versions, the rollout, what
// shadow rules would have refused, the emergency overrides, the answer to
// "why was I limited?" for a key and a request, and the fleet, and offers
// the writes an incident needs: promote or halt a canary, create or end an
// override.
//
// The console holds no data and makes no decision of its own: every page
// and every write is a call to the admin API (/admin/v1), made in-process
// with the token of the person signed in, so a read token may look and a
// write token may change, exactly as with curl. The token is posted once
// to a login form and kept on the server; the browser holds only a random
// session ID in an HttpOnly, SameSite=Strict cookie (Secure over TLS), so
// the token never appears in a URL, a page or a log. Every write carries
// the session's CSRF token and is refused without it; every response
// carries a Content-Security-Policy that allows scripts, styles and
// images from the console itself only; html/template escapes every value.
// Templates, style sheet and script are embedded: the console fetches
// nothing from any other host.
package console

import (
	"bytes"
	"cmp"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Prefix is where the console is served.
const Prefix = "/ui"

// CSP is the Content-Security-Policy of every response: everything from
// the console itself, no inline script or style, no framing, forms that
// post only back to the console.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Console. Every field but API and Authenticate may be
// left zero for its default.
type Config struct {
	// API serves the admin API under /admin/v1. The console calls it
	// in-process with the signed-in person's token. Required.
	API http.Handler
	// Authenticate says whose a token is: its name, whether it may write,
	// and ok false for a token that is unknown or may not use the admin
	// API. It is called once at login; the API checks the token again on
	// every call. Required.
	Authenticate func(secret string) (name string, write bool, ok bool)
	// Document returns the rules document of snapshot version v as
	// stored, for the diff between two versions. Nil leaves the diff out.
	Document func(r *http.Request, v int64) ([]byte, error)
	// CanaryWindow and CanaryMaxWait are the service's canary settings,
	// to show how long a running canary has left. Zero shows no time left.
	CanaryWindow, CanaryMaxWait time.Duration
	// SessionTTL is how long a session lasts after login. Zero means
	// 8 hours.
	SessionTTL time.Duration
	// MaxSessions bounds the sessions held at once; a login beyond it
	// ends the oldest. Zero means 10,000.
	MaxSessions int
	// Now reads the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives the console's log: logins, logouts and refused
	// writes, with the token's name, never its secret. Nil discards.
	Logger *slog.Logger
}

// Console is the operator console, an http.Handler for the paths under
// Prefix. It is safe for concurrent use.
type Console struct {
	cfg      Config
	pages    map[string]*template.Template
	mux      *http.ServeMux
	sessions *sessions
	api      *apiClient
}

// New returns the console cfg describes. It panics only if the embedded
// templates do not parse, which the package's tests rule out.
func New(cfg Config) *Console {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	c := &Console{cfg: cfg, pages: parsePages(), sessions: newSessions(cfg.MaxSessions, cfg.SessionTTL, cfg.Now),
		api: &apiClient{h: cfg.API}}
	c.routes()
	return c
}

// parsePages parses each page's template with the layout.
func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{"ago": ago, "left": left, "pct": pct, "json": prettyJSON, "join": strings.Join}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		pages[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, n))
	}
	return pages
}

// ServeHTTP sets the security headers every answer carries and serves the
// console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send "Origin:
	// null" on a form's POST, and the origin check could not tell it from
	// another site's.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.TLS != nil {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	c.mux.ServeHTTP(w, r)
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(Prefix+"/static/", http.FileServerFS(static))
	m.HandleFunc("GET "+Prefix+"/static/{file}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	m.HandleFunc("GET "+Prefix+"/login", c.loginPage)
	m.HandleFunc("POST "+Prefix+"/login", c.login)
	m.HandleFunc("POST "+Prefix+"/logout", c.form(c.logout))
	m.Handle("GET "+Prefix+"/{$}", http.RedirectHandler(Prefix+"/rules", http.StatusSeeOther))
	m.Handle("GET "+Prefix, http.RedirectHandler(Prefix+"/rules", http.StatusSeeOther))
	m.HandleFunc("GET "+Prefix+"/rules", c.read(c.rulesPage))
	m.HandleFunc("GET "+Prefix+"/rollout", c.read(c.rolloutPage))
	m.HandleFunc("POST "+Prefix+"/rollout/{how}", c.form(c.decide))
	m.HandleFunc("GET "+Prefix+"/shadow", c.read(c.shadowPage))
	m.HandleFunc("GET "+Prefix+"/overrides", c.read(c.overridesPage))
	m.HandleFunc("POST "+Prefix+"/overrides", c.form(c.createOverride))
	m.HandleFunc("POST "+Prefix+"/overrides/end", c.form(c.endOverride))
	m.HandleFunc("GET "+Prefix+"/fleet", c.read(c.fleetPage))
	m.HandleFunc("GET "+Prefix+"/explain", c.read(c.explainPage))
	// Explain is a POST, though it changes nothing, so that the API key
	// asked about stays out of URLs, browser history and access logs.
	m.HandleFunc("POST "+Prefix+"/explain", c.form(c.explain))
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", nil, errorView{Status: http.StatusNotFound, Message: "no console page " + r.URL.Path})
	})
	c.mux = m
}

// view is what every page's template gets: the page's own data and the
// session's, for the navigation, the CSRF field and the write controls.
type view struct {
	Page    string
	Session *session
	Flash   string
	Data    any
}

// render writes the page name with data, buffered so that a template error
// becomes a 500 rather than half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, s *session, data any) {
	v := view{Page: name, Session: s, Data: data}
	if s != nil {
		v.Flash = c.sessions.takeFlash(s)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.cfg.Logger.Error("console: render page", "page", name, "err", err)
		http.Error(w, "console: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// errorView is the error page's data.
type errorView struct {
	Status  int
	Message string
	Field   string
	Back    string
}
