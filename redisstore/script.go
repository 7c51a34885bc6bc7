package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

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
			"redis.register_function('" + fn + "', take)\n",
		script: body + "return take(KEYS, ARGV)\n",
	}, nil
}

// preload puts the take's code on every node the client knows, replicas
// too, so that no request pays for loading and compiling it inside its
// short deadline. It tries the function library first; if every node
// loaded it (or had it), takes use FCALL, else EVALSHA of the script, which
// it loads instead. A failure is logged, not returned: a node without the
// code gets it on first use (reload, or rueidis's NOSCRIPT fallback).
func (s *Store) preload(ctx context.Context) {
	nodes := s.client.Nodes()
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
			s.log.Warn("redis function library not preloaded; reloaded when a take finds it missing", "node", addr, "error", err)
		}
	}
	s.functions = functions
	if functions {
		return
	}
	for addr, node := range nodes {
		if err := node.Do(ctx, node.B().ScriptLoad().Script(s.code.script).Build()).Error(); err != nil {
			s.log.Warn("redis script not preloaded; the node loads it on first use", "node", addr, "error", err)
		}
	}
	s.log.Info("redis has no functions (before Redis 7): takes run as scripts by EVALSHA")
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
func (s *Store) exec(ctx context.Context, keys, args []string) rueidis.RedisResult {
	if !s.functions {
		return s.script.Exec(ctx, s.client, keys, args)
	}
	seen := s.loads.Load()
	resp := s.client.Do(ctx, s.fcall(keys, args))
	if !isFunctionMissing(resp.Error()) {
		return resp
	}
	// The node lost its functions (restarted without persistence, FUNCTION
	// FLUSH, a new node): the call ran nothing, so running it again after
	// loading is safe.
	if err := s.reload(ctx, seen); err != nil {
		return resp
	}
	return s.client.Do(ctx, s.fcall(keys, args))
}

// fcall builds FCALL of the take.
func (s *Store) fcall(keys, args []string) rueidis.Completed {
	return s.client.B().Fcall().Function(s.code.function).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// reload loads the library on every node again, once for all the takes
// that found it missing at the same time: a take that saw seen reloads
// ended waits for the reload under way, if any, and then loads only if
// none ended since.
func (s *Store) reload(ctx context.Context, seen uint64) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.loads.Load() != seen {
		return nil
	}
	defer s.loads.Add(1)
	var errs []error
	for addr, node := range s.client.Nodes() {
		if err := loadLibrary(ctx, node, s.code.library); err != nil && !isReadOnly(err) {
			errs = append(errs, fmt.Errorf("load on %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// isFunctionMissing reports whether err is a node saying it has no such
// function.
func isFunctionMissing(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(re.Error(), "Function not found")
}

// isUnknownCommand reports whether err is a node that does not know a
// command (FUNCTION before Redis 7).
func isUnknownCommand(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "ERR unknown command")
}

// isReadOnly reports whether err is a replica refusing a write.
func isReadOnly(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "READONLY")
}
