package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/redisstore"
)

// envRedisPassword holds the Redis password when no file does, so that it
// never has to be on the command line, where ps shows it to every user.
const envRedisPassword = "SLUICE_REDIS_PASSWORD"

// redisFlags are the flags that say how to reach Redis: addresses or URLs,
// credentials and TLS. addRedisFlags registers them; Config reads them
// once the flag set is parsed.
type redisFlags struct {
	addrs        string
	username     string
	passwordFile string
	tls          bool
	tlsFiles     redisstore.TLSFiles
	flushDelay   time.Duration
	takeConns    bool
}

// addRedisFlags registers the Redis connection flags on fs and returns
// where they land. Call Config after fs.Parse.
func addRedisFlags(fs *flag.FlagSet) *redisFlags {
	f := &redisFlags{}
	fs.StringVar(&f.addrs, "redis", "", "Redis `address`es, comma-separated: host:port, redis://[user]@host:port or rediss://... (TLS); "+
		"one standalone server or seeds of a Redis Cluster; empty keeps counts in process")
	fs.StringVar(&f.username, "redis-username", "", "Redis ACL `user`; empty means the one in --redis, else the default user")
	fs.StringVar(&f.passwordFile, "redis-password-file", "", "`file` holding the Redis password (one line); else $"+envRedisPassword+" holds it")
	fs.BoolVar(&f.tls, "redis-tls", false, "connect to Redis over TLS (as rediss:// does)")
	fs.StringVar(&f.tlsFiles.CA, "redis-tls-ca", "", "PEM `file` of the authorities Redis's certificates must chain to; empty trusts the system's; implies --redis-tls")
	fs.StringVar(&f.tlsFiles.Cert, "redis-tls-cert", "", "PEM `file` of the client certificate, for Redis that requires one (mutual TLS); implies --redis-tls")
	fs.StringVar(&f.tlsFiles.Key, "redis-tls-key", "", "PEM `file` of the client certificate's key; implies --redis-tls")
	fs.StringVar(&f.tlsFiles.ServerName, "redis-tls-server-name", "", "`name` Redis's certificates must hold; empty checks each node's host; implies --redis-tls")
	fs.DurationVar(&f.flushDelay, "redis-flush-delay", 0, "coalesce Redis writes: one connection per node whose writer waits up to this long after each write to gather more takes into it; "+
		"fewer system calls per decision under load, up to this much added latency (docs/redis.md, Write coalescing); 0 for none")
	fs.BoolVar(&f.takeConns, "redis-take-connections", true, "send takes on a connection per Redis node of sluice's own, written by the requests themselves (less CPU a decision); "+
		"false sends them through the Redis client with every other command, as before (docs/redis.md, Takes on the store's own connections)")
	return f
}

// Config returns the Redis configuration the flags describe, reading the
// password from --redis-password-file, else from $SLUICE_REDIS_PASSWORD
// (looked up with getenv), else from a --redis URL. No --redis gives a
// Config without addresses: counts in process. Errors name the flag at
// fault and never hold the password.
func (f *redisFlags) Config(getenv func(string) string) (redisstore.Config, error) {
	if f.flushDelay < 0 {
		return redisstore.Config{}, fmt.Errorf("--redis-flush-delay %v: must not be negative", f.flushDelay)
	}
	if strings.TrimSpace(f.addrs) == "" {
		if f.username != "" || f.passwordFile != "" || f.tls || !f.tlsFiles.IsZero() || f.flushDelay != 0 {
			return redisstore.Config{}, errors.New("--redis-username, --redis-password-file, --redis-tls* and --redis-flush-delay need --redis")
		}
		return redisstore.Config{}, nil
	}
	cfg, err := redisstore.ParseAddrs(f.addrs)
	if err != nil {
		return redisstore.Config{}, fmt.Errorf("--redis: %w", err)
	}
	cfg.FlushDelay = f.flushDelay
	cfg.RueidisTakes = !f.takeConns
	if f.username != "" {
		if cfg.Username != "" && cfg.Username != f.username {
			return redisstore.Config{}, fmt.Errorf("--redis-username %q and the user %q in --redis differ; give one", f.username, cfg.Username)
		}
		cfg.Username = f.username
	}
	env := getenv(envRedisPassword)
	switch {
	case f.passwordFile != "" && env != "":
		return redisstore.Config{}, fmt.Errorf("--redis-password-file and $%s are both set; give one", envRedisPassword)
	case (f.passwordFile != "" || env != "") && cfg.Password != "":
		return redisstore.Config{}, errors.New("--redis holds a password and --redis-password-file or $" + envRedisPassword + " holds another; keep it out of --redis")
	case f.passwordFile != "":
		if cfg.Password, err = readPassword(f.passwordFile); err != nil {
			return redisstore.Config{}, err
		}
	case env != "":
		cfg.Password = env
	}
	if f.tls || cfg.TLS != nil || !f.tlsFiles.IsZero() {
		if cfg.TLS, err = f.tlsFiles.Config(); err != nil {
			return redisstore.Config{}, fmt.Errorf("--redis-tls: %w", err)
		}
	}
	return cfg, nil
}

// readPassword reads a password file: its first line, without the line
// break an editor adds.
func readPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--redis-password-file: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("--redis-password-file %s: the first line is empty", file)
	}
	return pw, nil
}
