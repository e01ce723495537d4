package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is the release of redlimit this command is: between releases,
// the next one with "-dev" (main is not v0.1.0: it has keyed policies and
// serve). A release sets it (docs/release.md), or a build with -ldflags
// "-X main.version=v0.2.1"; the build information Go records (module
// version, VCS revision) is printed beside it.
var version = "v0.2.0-dev"

// versionCmd is "redlimit version".
var versionCmd = &command{
	name:     "version",
	summary:  "print the version, and the module version and revision it was built from",
	synopsis: "[--json]",
	noStore:  true,
	run:      cmdVersion,
	help: `
Prints the version of redlimit, then what Go recorded when it was built, as
far as it knows it: the module's version ("(devel)" or a pseudo-version such
as v0.0.0-20261124192346-fc52fbfa740b when built from a source tree), the VCS
revision and time, and whether the tree had uncommitted changes, and the Go
version.`,
}

// buildInfo is what the command knows of its build.
type buildInfo struct {
	Version       string `json:"version"`
	Module        string `json:"module,omitempty"`
	ModuleVersion string `json:"module_version,omitempty"`
	Revision      string `json:"revision,omitempty"`
	RevisionTime  string `json:"revision_time,omitempty"`
	Modified      bool   `json:"modified,omitempty"`
	Go            string `json:"go,omitempty"`
}

// readBuildInfo reads the build information Go embedded in the binary;
// a binary without it (or a test) has the version alone.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: version}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Module, b.ModuleVersion, b.Go = info.Main.Path, info.Main.Version, info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.RevisionTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// cmdVersion is "redlimit version".
func cmdVersion(_ context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	if _, code, ok := c.parse(fs, cmd, args); !ok {
		return code
	}
	b := readBuildInfo()
	if sf.json {
		return c.printJSON(cmd, b)
	}
	fmt.Fprintf(c.stdout, "redlimit %s\n", b.Version)
	if b.Module != "" {
		fmt.Fprintf(c.stdout, "module:   %s %s\n", b.Module, b.ModuleVersion)
	}
	if b.Revision != "" {
		rev := b.Revision
		if b.RevisionTime != "" {
			rev += " (" + b.RevisionTime + ")"
		}
		if b.Modified {
			rev += ", with uncommitted changes"
		}
		fmt.Fprintf(c.stdout, "revision: %s\n", rev)
	}
	if b.Go != "" {
		fmt.Fprintf(c.stdout, "go:       %s\n", b.Go)
	}
	return exitOK
}
