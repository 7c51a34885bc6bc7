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
	// that rewrites it; empty for a path refused whatever it reaches
	// (escapes nested too deep to read).
	Endpoint string
	// Canonical is that endpoint's spelling of the path: what to send.
	Canonical string
	// Problem says what in Path servers disagree on.
	Problem string
}

// Error says what is wrong with the path and what to send instead.
func (e *PathError) Error() string {
	if e.Endpoint == "" {
		return fmt.Sprintf("path %q is refused: %s; send a path without them", e.Path, e.Problem)
	}
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
	eq := func(a, b string) bool { return a == b || (e.fold && asciiEqualFold(a, b)) }
	if eq(p, e.exact) {
		return true
	}
	return e.prefix != "" && len(p) >= len(e.prefix) && eq(p[:len(e.prefix)], e.prefix)
}

// asciiEqualFold reports whether a and b are equal but for the case of
// ASCII letters. Other letters must match exactly: Unicode folding would
// match "ſ" (U+017F) as "s" in exact comparisons but not in byte-wise
// prefix ones; canonicalPath reads those two letters as ASCII instead.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// maxDecodes is how many times canonicalPath decodes escapes left in a
// path, as frameworks that decode again would: a path still holding
// escapes after that is refused whatever it reaches, so that nesting
// escapes cannot make reading it cost more than a pass per level.
const maxDecodes = 3

// foldsToASCII are the non-ASCII letters that Unicode case folding, as
// some servers apply it, maps to ASCII letters.
var foldsToASCII = strings.NewReplacer("\u017f", "s", "\u212a", "k")

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
	if _, problem, _ := canonicalPath(q); problem != "" {
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
//
// refuse is set when p holds escapes nested deeper than maxDecodes: such a
// path is refused whatever it reaches.
func canonicalPath(p string) (canon, problem string, refuse bool) {
	if plain(p) {
		return cleanPath(p), "", false
	}
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
	// frameworks: read it as they would, a few levels deep.
	for n := 0; ; n++ {
		// Dropping control characters can join an escape ("%\x0000" is
		// "%00" without the NUL), so drop them before each look.
		dropControls()
		i := escapeAt(p)
		if i < 0 {
			break
		}
		if n == maxDecodes {
			problem, refuse = fmt.Sprintf("it holds escapes nested more than %d deep", maxDecodes), true
			break
		}
		note("it holds an escape (%s) that some servers decode a second time", p[i:i+3])
		p = strings.ReplaceAll(unescape(p), `\`, "/")
	}
	dropControls()
	if q := foldsToASCII.Replace(p); q != p {
		note("it holds a letter that Unicode case folding reads as an ASCII one")
		p = q
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		if seg != "." && seg != ".." {
			if t := strings.TrimRight(seg, ". \t"); t != seg {
				note("its segment %q ends in a dot or a space, which some servers drop", seg)
				if t == "" && strings.HasPrefix(seg, "..") {
					// ".. " and "..." are ".." to a server that trims only
					// what follows it.
					t = ".."
				}
				seg = t
			}
		}
		segs[i] = seg
	}
	return path.Clean("/" + strings.Join(segs, "/")), problem, refuse
}

// plain reports whether p holds nothing canonicalPath has to rewrite but
// what path.Clean does.
func plain(p string) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c >= 0x7f || c == '\\' || c == ';' || c == '%':
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
// to, if any, and a *PathError (matching ErrPathSpelling) when the path is
// spelled so that servers disagree on its endpoint.
//
// The rule: another spelling of a declared path reaches its endpoint, or
// is refused; it never slips past. Path letters match ignoring ASCII case
// unless the endpoint is CaseSensitive, and methods ignoring case.
// Cleaning is ignored (doubled slashes, "." and ".." segments, a trailing
// slash). The path is read twice: as a strict server reads it (cleaned,
// nothing else), and as the most lenient one would (matrix parameters
// ";x=1" dropped, a backslash as /, escapes left after decoding decoded
// again, trailing dots and spaces of a segment and control characters
// dropped, the letters ſ and K as s and k). The answer is the endpoint
// either reading reaches (the strict one's first), so that its limits apply
// whichever handler the server runs. It carries a *PathError, for a 400
// that names the path to send, when the path needed a lenient rewrite
// other than dropping matrix parameters, when the readings reach two
// different endpoints, or when escapes are nested too deep to read. A
// HEAD request matches a GET endpoint, as most servers route them, and a
// prefix endpoint "/v1/export/*" also matches "/v1/export" itself.
func (s *Set) MatchEndpoint(method, p string) (Endpoint, bool, error) {
	canon, problem, refuse := canonicalPath(p)
	method = upperASCII(method)
	lenient := s.matchPath(method, canon)
	strict := lenient
	if strictPath := cleanPath(p); strictPath != canon {
		strict = s.matchPath(method, strictPath)
	}
	found := strict
	if found < 0 {
		found = lenient
	}
	switch {
	case refuse:
		e := &PathError{Path: p, Canonical: canon, Problem: problem}
		if found >= 0 {
			e.Endpoint = s.endpoints[found].Name
			return s.endpoints[found], true, e
		}
		return Endpoint{}, false, e
	case found < 0:
		return Endpoint{}, false, nil
	case strict >= 0 && lenient >= 0 && strict != lenient:
		return s.endpoints[lenient], true, &PathError{Path: p, Endpoint: s.endpoints[lenient].Name, Canonical: canon,
			Problem: fmt.Sprintf("servers that keep its matrix parameters (;…) route it to endpoint %s instead", s.endpoints[strict].Name)}
	case problem != "":
		return s.endpoints[found], true, &PathError{Path: p, Endpoint: s.endpoints[found].Name, Canonical: canon, Problem: problem}
	}
	// One reading reaches an endpoint, the other none: the endpoint's
	// limits apply, whichever handler the server then runs.
	return s.endpoints[found], true, nil
}

// matchPath returns the index of the first endpoint of method that path
// p (already canonical or cleaned) belongs to, or -1.
func (s *Set) matchPath(method, p string) int {
	for i := range s.endpoints {
		ep := &s.endpoints[i]
		if ep.Method != "" && ep.Method != method && !(method == http.MethodHead && ep.Method == http.MethodGet) {
			continue
		}
		if s.paths[i].matches(p) {
			return i
		}
	}
	return -1
}

// cleanPath is p as a strict server reads it: cleaned, nothing else.
func cleanPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p)
}

// upperASCII is method in upper case: methods are case-sensitive in HTTP,
// but frameworks that route "get" as GET are common.
func upperASCII(method string) string {
	for i := 0; i < len(method); i++ {
		if c := method[i]; 'a' <= c && c <= 'z' {
			return strings.ToUpper(method)
		}
	}
	return method
}

// Endpoint returns the endpoint a request's method and path belong to, if
// any: MatchEndpoint without its error. A path that spells an endpoint's
// path in a way servers disagree on is still counted under that endpoint;
// a gateway should call MatchEndpoint and refuse it.
func (s *Set) Endpoint(method, p string) (Endpoint, bool) {
	ep, ok, _ := s.MatchEndpoint(method, p)
	return ep, ok
}
