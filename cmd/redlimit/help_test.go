package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelp: 'redlimit help', --help, -h and -help print the usage on stdout
// and exit 0; it lists every command of the table with its synopsis and
// summary, and what the commands share.
func TestHelp(t *testing.T) {
	var want bytes.Buffer
	usage(&want)
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"-help"}} {
		r := call(t, deps{}, args...)
		if r.code != exitOK || r.stderr != "" || r.stdout != want.String() {
			t.Errorf("redlimit %q: %s; want exit 0 and the usage on stdout", args, r)
		}
	}
	for _, cmd := range commands {
		for _, s := range []string{"\n  redlimit " + cmd.name + " ", "\n  " + cmd.name + " ", cmd.summary} {
			if !strings.Contains(want.String(), s) {
				t.Errorf("usage lacks %q:\n%s", s, want.String())
			}
		}
	}
	for _, s := range []string{"Usage:\n  redlimit demo", "redlimit simulate  [--traffic", "--per second|minute|hour|day",
		"token-bucket (--burst)", "leaky-bucket (--capacity)", "--timeout D", "demo, set-rate, acquire, get, delete, migrate also take"} {
		if !strings.Contains(want.String(), s) {
			t.Errorf("usage: no %q in\n%s", s, want.String())
		}
	}
	// Without a command it is a usage error: the usage on stderr, exit 2.
	if r := call(t, deps{}); r.code != exitError || r.stdout != "" || r.stderr != want.String() {
		t.Errorf("redlimit: %s; want exit 2 and the usage on stderr", r)
	}
}

// TestCommandHelp: 'redlimit help CMD', 'redlimit CMD -h' and --help print
// the same help on stdout and exit 0, also after NAME; bench's -h is the
// benchmark's own, but 'help bench' is ours.
func TestCommandHelp(t *testing.T) {
	for _, cmd := range commands {
		r := call(t, deps{}, "help", cmd.name)
		if r.code != exitOK || r.stderr != "" || !strings.HasPrefix(r.stdout, "usage: redlimit "+cmd.name) || !strings.Contains(r.stdout, strings.TrimSpace(cmd.help)[:20]) {
			t.Errorf("redlimit help %s: %s", cmd.name, r)
			continue
		}
		if cmd.passFlags {
			continue
		}
		forms := [][]string{{cmd.name, "-h"}, {cmd.name, "--help"}}
		if cmd.wantName {
			forms = append(forms, []string{cmd.name, "x", "-h"})
		}
		for _, args := range forms {
			if h := call(t, deps{}, args...); h.code != exitOK || h.stderr != "" || h.stdout != r.stdout {
				t.Errorf("redlimit %q: %s; want exit 0 and, on stdout, what help %s prints:\n%s", args, h, cmd.name, r.stdout)
			}
		}
	}
	r := call(t, deps{}, "set-rate", "-h")
	for _, want := range []string{"-algorithm algorithm", "-burst", "-capacity", "-per unit", "fixed-window     at most rate per window", "-timeout duration"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("set-rate -h: no %q in\n%s", want, r.stdout)
		}
	}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"help", "frobnicate"}, "redlimit help: unknown command \"frobnicate\"\nrun 'redlimit help' for the list of commands\n"},
		{[]string{"help", "get", "acquire"}, "redlimit help: unexpected argument \"acquire\"\nrun 'redlimit help help' for usage\n"},
		{[]string{"frobnicate"}, "redlimit: unknown command \"frobnicate\"\nrun 'redlimit help' for usage\n"},
	} {
		if r := call(t, deps{}, tc.args...); r.code != exitError || r.stdout != "" || r.stderr != tc.stderr {
			t.Errorf("redlimit %q: %s; want exit 2 and stderr %q", tc.args, r, tc.stderr)
		}
	}
}

// TestFlagErrorIsOneLine: a bad flag keeps the command's name and prints one
// line and where to read the usage, with exit status 2.
func TestFlagErrorIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"acquire", "x", "-x"}, "redlimit acquire: flag provided but not defined: -x\nrun 'redlimit help acquire' for usage\n"},
		{[]string{"acquire", "--bogus", "x"}, "redlimit acquire: flag provided but not defined: -bogus\nrun 'redlimit help acquire' for usage\n"},
		{[]string{"set-rate", "x", "--rate", "two"}, "redlimit set-rate: invalid value \"two\" for flag -rate: parse error\nrun 'redlimit help set-rate' for usage\n"},
		{[]string{"get"}, "redlimit get: missing NAME\nrun 'redlimit help get' for usage\n"},
		{[]string{"simulate", "--redis", "redis://localhost"}, "redlimit simulate: flag provided but not defined: -redis\nrun 'redlimit help simulate' for usage\n"},
		{[]string{"version", "extra"}, "redlimit version: unexpected argument \"extra\"\nrun 'redlimit help version' for usage\n"},
		{[]string{"get", "x", "--timeout", "0s"}, "redlimit get: invalid --timeout 0s: must be positive\nrun 'redlimit help get' for usage\n"},
	} {
		if r := call(t, deps{}, tc.args...); r.code != exitError || r.stdout != "" || r.stderr != tc.stderr {
			t.Errorf("redlimit %q: %s; want exit 2 and stderr %q", tc.args, r, tc.stderr)
		}
	}
}

// TestVersion: 'redlimit version' prints the version variable, which a
// release build sets with -ldflags, and the build information Go recorded.
func TestVersion(t *testing.T) {
	r := call(t, deps{}, "version")
	if r.code != exitOK || r.stderr != "" || !strings.HasPrefix(r.stdout, "redlimit "+version+"\n") {
		t.Fatalf("redlimit version: %s", r)
	}
	r = call(t, deps{}, "version", "--json")
	var got struct {
		Version       string `json:"version"`
		Module        string `json:"module"`
		ModuleVersion string `json:"module_version"`
		Revision      string `json:"revision"`
		RevisionTime  string `json:"revision_time"`
		Modified      bool   `json:"modified"`
		Go            string `json:"go"`
	}
	decodeOne(t, r.stdout, &got)
	if r.code != exitOK || got.Version != version || !strings.HasPrefix(got.Go, "go") {
		t.Errorf("redlimit version --json: %s: %+v", r, got)
	}
}

// TestVersionLdflags builds the command with the version set by -ldflags, as
// a release build does, and runs it.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command: not in -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "redlimit")
	build := exec.Command(goTool, "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7-test", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("redlimit version: %v", err)
	}
	var got struct {
		Version string `json:"version"`
		Module  string `json:"module"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Version != "v9.8.7-test" || got.Module != "github.com/redlimit/redlimit/cmd/redlimit" {
		t.Errorf("redlimit version --json built with -X main.version=v9.8.7-test: %s (%v)", out, err)
	}
}

// TestReadmeShowsHelp keeps the README's copy of the usage equal to the
// command's, so the page a newcomer reads first never drifts from the tool.
func TestReadmeShowsHelp(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	usage(&want)
	if !strings.Contains(string(readme), "```\n"+want.String()+"```\n") {
		t.Errorf("README.md's \"The command\" section differs from 'redlimit help'; paste this there:\n%s", want.String())
	}
}
