package redisstore

import (
	"embed"
	"strings"

	"github.com/redlimit/redlimit/algorithm"
)

// scripts holds the Lua run on Redis: the limiter library's files, and
// config.lua and setconfig.lua.
//
//go:embed scripts/*.lua
var scripts embed.FS

// algorithmScripts names the Lua file of each registered algorithm, in
// the registry's order: the name of its Go package in algorithm/, whose
// rules the file follows (algorithm.Spec.Package).
func algorithmScripts() []string {
	specs := algorithm.All()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Package
	}
	return names
}

// sharedScripts are the files every algorithm's file builds on, in the
// order they are joined: the prelude (time, state strings, replies, the
// table algorithms register in), then the helpers that the windows and the
// buckets share.
var sharedScripts = []string{"prelude", "windows", "deficit"}

// joinScripts joins the named files of scripts/ (without ".lua") into one
// chunk, in the order given: the files share its top-level locals.
func joinScripts(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := scripts.ReadFile("scripts/" + n + ".lua")
		if err != nil {
			panic("redisstore: missing Lua file " + n + ".lua")
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}

// limiterFiles lists the files of the limiter library, in the order they
// are joined: the shared ones, each algorithm's, the batch loop, then the
// keyed calls of policies.
func limiterFiles() []string {
	files := append([]string(nil), sharedScripts...)
	files = append(files, algorithmScripts()...)
	return append(files, "limiter", "policy")
}

// mustRead is the text of one file of scripts/.
func mustRead(name string) string {
	src, err := scripts.ReadFile("scripts/" + name)
	if err != nil {
		panic("redisstore: missing Lua file " + name)
	}
	return string(src)
}
