package rules

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
)

// ErrPathSpelling is what every *PathError is: a request path that spells a
// declared endpoint's path in a way servers disagree on. A gateway answers
// it with 400, since letting it through could let a caller reach the
// endpoint's handler past its limits and cost.
var ErrPathSpelling = errors.New("path spelled so that servers disagree on its endpoint")

// PathError is the error of [Set.MatchEndpoint] for a path that reaches
// an endpoint only on servers that rewrite it: a backslash, a trailing dot
// or space in a segment, an escape left after decoding, or a control
// character.
type PathError struct {
	// Path is the request's path as given.
	Path string
	// Endpoint is the name of the endpoint the path reaches on a server
	// that rewrites it.
	Endpoint string
	// Canonical is that endpoint's spelling of the path: what to send.
	Canonical string
	// Problem says what in Path servers disagree on.
	Problem string
}

// Error says what is wrong with the path and what to send instead.
func (e *PathError) Error() string {
	return fmt.Sprintf("path %q is another spelling of endpoint %s: %s; send %s", e.Path, e.Endpoint, e.Problem, e.Canonical)
}

// Unwrap makes every PathError match ErrPathSpelling.
func (e *PathError) Unwrap() error { return ErrPathSpelling }

// endpointPath is a declared endpoint's path in the form requests are
// compared with.
type endpointPath struct {
	exact  string // cleaned path; for a prefix endpoint, the path without "/*"
	prefix string // for a prefix endpoint, the prefix; else empty
	fold   bool   // compare ignoring case
}

func newEndpointPath(ep *Endpoint) endpointPath {
	e := endpointPath{fold: !ep.CaseSensitive}
	if p, ok := strings.CutSuffix(ep.Path, "*"); ok {
		e.prefix, e.exact = p, path.Clean(p)
	} else {
		e.exact = path.Clean(ep.Path)
	}
	return e
}

func (e *endpointPath) matches(p string) bool {
	eq := func(a, b string) bool { return a == b || (e.fold && strings.EqualFold(a, b)) }
	if eq(p, e.exact) {
		return true
	}
	return e.prefix != "" && len(p) >= len(e.prefix) && eq(p[:len(e.prefix)], e.prefix)
}

// checkEndpointPath refuses a declared path no request could spell without
// a PathError.
func checkEndpointPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q does not start with /", p)
	}
	q := strings.TrimSuffix(p, "*")
	if strings.ContainsRune(q, ';') {
		return fmt.Errorf("%q holds ';': matrix parameters are ignored when paths are matched; declare the path without them", p)
	}
	if _, problem := canonicalPath(q); problem != "" {
		return fmt.Errorf("%q: %s", p, problem)
	}
	return nil
}

// canonicalPath returns the path a request reaches on a server that is
// lenient with spellings, and what in p such a server rewrites, if
// anything. Cleaning (path.Clean: no doubled slashes, "." or ".." segments
// or trailing slash) and matrix parameters (";x=1" in a segment, which
// servers such as Tomcat drop) are ordinary and rewrite nothing worth a
// problem; a backslash, a segment that ends in a dot or a space, an escape
// left after decoding and a control character are problems.
func canonicalPath(p string) (string, string) {
	if plain(p) {
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		return path.Clean(p), ""
	}
	problem := ""
	note := func(format string, a ...any) {
		if problem == "" {
			problem = fmt.Sprintf(format, a...)
		}
	}
	// Servers that stop at a NUL or drop other control characters read
	// the path without them.
	dropControls := func() {
		if i := strings.IndexFunc(p, isControl); i >= 0 {
			note("it holds control character 0x%02x", p[i])
			p = strings.Map(func(r rune) rune {
				if isControl(r) {
					return -1
				}
				return r
			}, p)
		}
	}
	dropControls()
	if strings.ContainsRune(p, '\\') {
		note(`it holds a backslash, which some servers read as /`)
		p = strings.ReplaceAll(p, `\`, "/")
	}
	// An escape left after the server's decoding is decoded again by some
	// frameworks: read it as they would, until none is left. Each pass
	// shortens the path, so this ends.
	for i := escapeAt(p); i >= 0; i = escapeAt(p) {
		note("it holds an escape (%s) that some servers decode a second time", p[i:i+3])
		p = strings.ReplaceAll(unescape(p), `\`, "/")
	}
	dropControls()
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		if seg != "." && seg != ".." {
			if t := strings.TrimRight(seg, ". \t"); t != seg {
				note("its segment %q ends in a dot or a space, which some servers drop", seg)
				seg = t
			}
		}
		segs[i] = seg
	}
	return path.Clean("/" + strings.Join(segs, "/")), problem
}

// plain reports whether p holds nothing canonicalPath has to rewrite but
// what path.Clean does.
func plain(p string) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c == 0x7f || c == '\\' || c == ';' || c == '%':
			return false
		case c == '.' || c == ' ':
			if i+1 == len(p) || p[i+1] == '/' {
				return false
			}
		}
	}
	return true
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// escapeAt returns the index of the first escape (% and two hex digits)
// in p, or -1.
func escapeAt(p string) int {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '%' && isHex(p[i+1]) && isHex(p[i+2]) {
			return i
		}
	}
	return -1
}

// unescape decodes every escape in p, leaving a % that starts none as it
// is, as a lenient decoder does.
func unescape(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			b.WriteByte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// MatchEndpoint returns the endpoint a request's method and path belong
// to, if any, and a *PathError (matching ErrPathSpelling) when the path
// reaches that endpoint only through a spelling servers disagree on.
//
// The rule: another spelling of a declared path reaches its endpoint, or
// is refused; it never slips past. Path letters match ignoring case
// unless the endpoint is CaseSensitive. Cleaning is ignored (doubled
// slashes, "." and ".." segments, a trailing slash), and so are matrix
// parameters (";x=1" in a segment). A backslash, a segment that ends in a
// dot or a space, an escape such as %2e left after decoding, or a control
// character is read as the most lenient server would read it: when that
// reaches an endpoint, the endpoint is returned with a *PathError, for a
// 400 that names the path to send. A HEAD request matches a GET endpoint,
// as most servers route them, and a prefix endpoint "/v1/export/*" also
// matches "/v1/export" itself.
func (s *Set) MatchEndpoint(method, p string) (Endpoint, bool, error) {
	canon, problem := canonicalPath(p)
	for i := range s.endpoints {
		ep := &s.endpoints[i]
		if ep.Method != "" && ep.Method != method && !(method == http.MethodHead && ep.Method == http.MethodGet) {
			continue
		}
		if !s.paths[i].matches(canon) {
			continue
		}
		if problem != "" {
			return *ep, true, &PathError{Path: p, Endpoint: ep.Name, Canonical: canon, Problem: problem}
		}
		return *ep, true, nil
	}
	return Endpoint{}, false, nil
}

// Endpoint returns the endpoint a request's method and path belong to, if
// any: MatchEndpoint without its error. A path that spells an endpoint's
// path in a way servers disagree on is still counted under that endpoint;
// a gateway should call MatchEndpoint and refuse it.
func (s *Set) Endpoint(method, p string) (Endpoint, bool) {
	ep, ok, _ := s.MatchEndpoint(method, p)
	return ep, ok
}
