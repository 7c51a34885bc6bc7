package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/rueidis"
)

// ParseAddrs reads Redis addresses as an operator writes them, comma-
// separated: "host:port", "redis://[user][:password]@host[:port]" or
// "rediss://..." for TLS ("redis://:pw@host" is the default user's
// password; "redis://name@host" a user whose password comes from
// elsewhere, such as a file), or "redis-sentinel://host[:port]/<master
// set>" for a Redis Sentinel watching the primary named master set (port
// 26379 by default; the user and password are the primary's). One address
// is a standalone server or a cluster seed; several are seeds of one
// cluster, or after a redis-sentinel:// URL more Sentinels of its master
// set. It returns a Config holding Addrs, MasterSet for Sentinels and,
// from URLs, Username, Password and, for rediss, a TLS configuration that
// trusts the system's authorities (replace it with TLSFiles.Config to
// trust others or to present a client certificate).
//
// Every address of one Config shares one client, so URLs must agree on the
// scheme and on credentials; a URL may leave them out and plain addresses
// always do. A redis:// URL's path may only name database 0 ("/" or "/0"):
// Redis Cluster has no other. Errors name the address with its password
// replaced by "xxxxx", and never hold the password itself.
func ParseAddrs(s string) (Config, error) {
	var (
		cfg    Config
		scheme string // the scheme of the first URL; "" before one
		user   *url.Userinfo
	)
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			if strings.Contains(a, "@") {
				return Config{}, fmt.Errorf("redis address %q: a user or password needs a redis:// or rediss:// URL (redis://user:password@host:port)", redact(a))
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return Config{}, fmt.Errorf("redis address %q: want host:port or a redis://, rediss:// or redis-sentinel:// URL: %w", a, err)
			}
			cfg.Addrs = append(cfg.Addrs, a)
			continue
		}
		u, opt, err := parseURL(a)
		if err != nil {
			return Config{}, err
		}
		if scheme != "" && u.Scheme != scheme {
			return Config{}, fmt.Errorf("redis address %q is %s:// but an earlier one is %s://: every address of one Redis must agree on TLS and Sentinel", redact(a), u.Scheme, scheme)
		}
		scheme = u.Scheme
		if u.User != nil {
			if user != nil && user.String() != u.User.String() {
				return Config{}, fmt.Errorf("redis address %q has other credentials than an earlier one: every address of one Redis shares one user", redact(a))
			}
			user = u.User
			cfg.Username, cfg.Password = opt.Username, opt.Password
		}
		if set := opt.Sentinel.MasterSet; set != "" {
			if cfg.MasterSet != "" && set != cfg.MasterSet {
				return Config{}, fmt.Errorf("redis address %q names master set %q but an earlier one %q: one store follows one primary", redact(a), set, cfg.MasterSet)
			}
			cfg.MasterSet = set
		}
		cfg.Addrs = append(cfg.Addrs, opt.InitAddress...)
		if opt.TLSConfig != nil {
			// Not rueidis's own: its ServerName is this URL's host, and
			// each node must be checked against the host it is dialled at.
			cfg.TLS = &tls.Config{MinVersion: opt.TLSConfig.MinVersion}
		}
	}
	if len(cfg.Addrs) == 0 {
		return Config{}, fmt.Errorf("no redis address in %q", redact(s))
	}
	return cfg, nil
}

// sentinelScheme is the scheme of a Redis Sentinel's address.
const sentinelScheme = "redis-sentinel"

// parseURL reads one redis://, rediss:// or redis-sentinel:// URL: the
// forms sluice accepts are checked here, with errors that hide the
// password, and rueidis.ParseURL reads the rest (default port, user,
// password, TLS). A Sentinel's master set comes back in
// opt.Sentinel.MasterSet.
func parseURL(a string) (u *url.URL, opt rueidis.ClientOption, err error) {
	shown := redact(a)
	if u, err = url.Parse(a); err != nil {
		// url's errors quote the whole input, password and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, opt, fmt.Errorf("redis address %q: not a URL: %w", shown, err)
	}
	set := strings.TrimPrefix(u.Path, "/")
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != sentinelScheme:
		return nil, opt, fmt.Errorf("redis address %q: scheme %q, want redis://, rediss:// (TLS) or redis-sentinel://", shown, u.Scheme)
	case u.Hostname() == "":
		return nil, opt, fmt.Errorf("redis address %q names no host", shown)
	case u.Scheme == sentinelScheme && (set == "" || strings.Contains(set, "/")):
		return nil, opt, fmt.Errorf("redis address %q: a Sentinel's URL names the master set it follows as its path: redis-sentinel://host:26379/mymaster", shown)
	case u.Scheme != sentinelScheme && set != "" && set != "0":
		return nil, opt, fmt.Errorf("redis address %q: database %q: sluice uses database 0, the only one Redis Cluster has", shown, set)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, opt, fmt.Errorf("redis address %q: options in the URL are not read; use the --redis-* flags", shown)
	}
	plain := *u
	plain.Path = ""
	if u.Scheme == sentinelScheme {
		plain.Scheme = "redis"
		if u.Port() == "" {
			plain.Host = net.JoinHostPort(u.Hostname(), "26379")
		}
	}
	if opt, err = rueidis.ParseURL(plain.String()); err != nil {
		return nil, opt, fmt.Errorf("redis address %q: %w", shown, err)
	}
	if u.Scheme == sentinelScheme {
		opt.Sentinel.MasterSet = set
	}
	return u, opt, nil
}

// redact returns s with the password of every URL in it replaced by
// "xxxxx", so that it can go into an error or a log.
func redact(s string) string {
	var b strings.Builder
	for i, a := range strings.Split(s, ",") {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(redactOne(a))
	}
	return b.String()
}

func redactOne(a string) string {
	// The user info ends at the last '@': a password may hold '@' itself
	// when written unescaped, and masking too much beats showing a secret.
	at := strings.LastIndexByte(a, '@')
	if at < 0 {
		return a
	}
	start := strings.Index(a, "://")
	if start < 0 || start+len("://") > at {
		// Not a URL: whatever precedes the '@' may be a password.
		return "xxxxx" + a[at:]
	}
	start += len("://")
	colon := strings.IndexByte(a[start:at], ':')
	if colon < 0 {
		return a // a user name alone, no secret
	}
	return a[:start+colon+1] + "xxxxx" + a[at:]
}

// TLSFiles names the files that set up TLS to Redis. Every field may be
// empty.
type TLSFiles struct {
	// CA is a PEM file of the authorities whose certificates the servers'
	// must chain to. Empty trusts the system's authorities.
	CA string
	// Cert and Key are the PEM files of a client certificate and its key,
	// for servers that require one (mutual TLS, tls-auth-clients yes).
	// Both or neither.
	Cert, Key string
	// ServerName is the name every server's certificate must hold. Empty
	// checks each node against the host it is dialled at, which in a
	// cluster is the address the cluster announces; set it when the nodes
	// share a certificate for one name.
	ServerName string
}

// Config loads the files and returns the TLS configuration they describe,
// TLS 1.2 or later, verifying the servers' certificates. Errors name the
// file at fault and why.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("redis TLS authority: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS authority %s: no PEM certificate in it", f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "":
		return nil, fmt.Errorf("redis TLS client certificate %s has no key file", f.Cert)
	case f.Key != "":
		return nil, fmt.Errorf("redis TLS client key %s has no certificate file", f.Key)
	}
	return cfg, nil
}

// IsZero reports whether f names nothing, so that TLS needs no files.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }
