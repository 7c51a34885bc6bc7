package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// luaFiles holds the script's parts. Reading them is all the package does
// with it.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// takeCode is the code every take runs, in the two forms a server may
// take it in. Both hold the same body, lua/prelude.lua, then every
// lua/alg_*.lua in sorted order, then lua/take.lua; adding an algorithm is
// adding a file, with no Go changes.
type takeCode struct {
	// function is the name the library registers the take under:
	// sluice_take_ and the start of the body's SHA-1, so that gateways of
	// different versions sharing a Redis each call their own code.
	function string
	// library is the body as a Redis function library (FUNCTION LOAD, then
	// FCALL function): its top level runs once per load.
	library string
	// script is the body as a script (EVALSHA), for servers older than
	// Redis 7: its top level runs at every call.
	script string
}

// assemble builds the take's code from the embedded files.
func assemble() (takeCode, error) {
	algs, err := fs.Glob(luaFiles, "lua/alg_*.lua")
	if err != nil {
		return takeCode{}, fmt.Errorf("redisstore: list algorithm scripts: %w", err)
	}
	slices.Sort(algs)
	parts := append(append([]string{"lua/prelude.lua"}, algs...), "lua/take.lua")
	var b strings.Builder
	for _, p := range parts {
		src, err := luaFiles.ReadFile(p)
		if err != nil {
			return takeCode{}, fmt.Errorf("redisstore: read %s: %w", p, err)
		}
		b.Write(src)
		// Files may end without a newline; Lua would then join the last line
		// of one with the first of the next.
		b.WriteString("\n")
	}
	body := b.String()
	sum := sha1.Sum([]byte(body))
	version := hex.EncodeToString(sum[:8])
	fn := "sluice_take_" + version
	return takeCode{
		function: fn,
		library: "#!lua name=sluice_" + version + "\n" + body +
			"fresh_by_nx = true\n" +
			"redis.register_function('" + fn + "', take)\n",
		script: body + "return take(KEYS, ARGV)\n",
	}, nil
}

// preload puts the take's code on every node the client knows, replicas
// too, so that no request pays for loading and compiling it inside its
// short deadline. It tries the function library first; if every node
// loaded it (or had it, or is a replica, which gets it from its primary),
// takes use FCALL (it returns true), else EVALSHA of the script, which it
// loads instead. A failure is logged, not returned: a node without the
// code gets it on first use (see exec, and rueidis's NOSCRIPT fallback).
func (s *Store) preload(ctx context.Context, client rueidis.Client) bool {
	nodes := client.Nodes()
	functions := true
	for addr, node := range nodes {
		err := loadLibrary(ctx, node, s.code.library)
		switch {
		case err == nil:
		case isUnknownCommand(err):
			// Redis 6 or older: no functions anywhere, or the fleet is mixed.
			functions = false
		case isReadOnly(err):
			// A replica takes the library from its primary's replication
			// stream (functions replicate, scripts do not).
		default:
			// NOPERM for an ACL user without FUNCTION, a timeout: scripts
			// work wherever EVALSHA does, so use them everywhere.
			functions = false
			s.log.Warn("redis function library not loaded; takes run as scripts", "node", addr, "error", err)
		}
	}
	if functions {
		return true
	}
	for addr, node := range nodes {
		if err := node.Do(ctx, node.B().ScriptLoad().Script(s.code.script).Build()).Error(); err != nil {
			s.log.Warn("redis script not preloaded; the node loads it on first use", "node", addr, "error", err)
		}
	}
	s.log.Info("takes run as scripts by EVALSHA: not every node loaded the function library")
	return false
}

// loadLibrary loads the library on one node. A library of that name
// already there is the same code: its name holds the code's hash.
func loadLibrary(ctx context.Context, node rueidis.Client, library string) error {
	err := node.Do(ctx, node.B().FunctionLoad().FunctionCode(library).Build()).Error()
	if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(re.Error(), "already exists") {
		return nil
	}
	return err
}

// exec runs the take on the node that owns keys' slot.
func (s *Store) exec(ctx context.Context, l *link, keys, args []string) rueidis.RedisResult {
	if !l.functions {
		return s.script.Exec(ctx, l.client, keys, args)
	}
	// Every key shares the first one's hash tag (appendKey), so rueidis
	// is given the first alone to route by and the others as they go on
	// the wire, declared as keys by Numkeys: one slot computed, not one a
	// limit.
	resp := l.client.Do(ctx, l.client.B().Fcall().Function(s.code.function).
		Numkeys(int64(len(keys))).Key(keys[0]).Arg(keys[1:]...).Arg(args...).Build())
	if !isFunctionMissing(resp.Error()) {
		return resp
	}
	// The node lost its functions (restarted without persistence, FUNCTION
	// FLUSH, a node added). The call ran nothing, so this take runs the
	// same code as a script instead, within its own deadline, while the
	// library is loaded again in the background: compiling it may take
	// longer than a take's few milliseconds, and a reload bounded by them
	// could fail for ever.
	s.reload(l)
	return s.script.Exec(ctx, l.client, keys, args)
}

const (
	// reloadTimeout bounds one background reload of the library on every
	// node.
	reloadTimeout = 10 * time.Second
	// reloadEvery is the least time between the starts of two reloads, so
	// that a node that keeps refusing the library costs a reload and a log
	// line a second, not one per take.
	reloadEvery = time.Second
)

// reload starts loading the library on every node again, unless a reload
// is under way or started less than reloadEvery ago, or the store is
// closing. Close waits for it.
func (s *Store) reload(l *link) {
	if last := s.lastReload.Load(); last != 0 && time.Since(time.Unix(0, last)) < reloadEvery {
		return
	}
	s.background(&s.reloading, func(ctx context.Context) {
		s.lastReload.Store(time.Now().UnixNano())
		for addr, node := range l.client.Nodes() {
			if err := loadLibrary(ctx, node, s.code.library); err != nil && !isReadOnly(err) {
				s.log.Warn("redis function library not reloaded; takes on the node run as scripts meanwhile", "node", addr, "error", err)
			}
		}
	})
}

// background runs f in a goroutine, within reloadTimeout, unless busy
// says one like it is under way or the store is closing. busy is set
// while it runs, and Close waits for it (s.reloads).
func (s *Store) background(busy *atomic.Bool, f func(ctx context.Context)) {
	if !busy.CompareAndSwap(false, true) {
		return
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.stopping {
		busy.Store(false)
		return
	}
	s.reloads.Go(func() {
		defer busy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
		defer cancel()
		f(ctx)
	})
}

// isFunctionMissing reports whether err is a node saying it has no such
// function.
func isFunctionMissing(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(re.Error(), "Function not found")
}

// isUnknownCommand reports whether err is a node that does not know a
// command (FUNCTION before Redis 7). rueidis drops the "ERR " the reply
// starts with.
func isUnknownCommand(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(strings.TrimPrefix(re.Error(), "ERR "), "unknown command")
}

// isReadOnly reports whether err is a replica refusing a write.
func isReadOnly(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "READONLY")
}
