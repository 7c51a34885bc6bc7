package redisstore

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// luaFiles holds the script's parts. Reading them is all the package does
// with it.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// takeScript assembles the script a Take runs: lua/prelude.lua, then every
// lua/alg_*.lua in sorted order, then lua/take.lua. Adding an algorithm is
// adding a file; no Go changes.
func takeScript() (string, error) { return assemble("lua/take.lua") }

// uptoScript assembles the script TakeUpTo runs: the same prelude and
// algorithms, then lua/take_upto_main.lua in place of lua/take.lua.
func uptoScript() (string, error) { return assemble("lua/take_upto_main.lua") }

// assemble concatenates the prelude, the algorithms and main, the file
// holding the script's body.
func assemble(main string) (string, error) {
	algs, err := fs.Glob(luaFiles, "lua/alg_*.lua")
	if err != nil {
		return "", fmt.Errorf("redisstore: list algorithm scripts: %w", err)
	}
	slices.Sort(algs)
	parts := append(append([]string{"lua/prelude.lua"}, algs...), main)
	var b strings.Builder
	for _, p := range parts {
		src, err := luaFiles.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("redisstore: read %s: %w", p, err)
		}
		b.Write(src)
		// Files may end without a newline; Lua would then join the last line
		// of one with the first of the next.
		b.WriteString("\n")
	}
	return b.String(), nil
}
