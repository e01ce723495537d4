package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noEnv(string) string { return "" }

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, noEnv, io.Discard, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v", err)
	}
	for _, f := range []string{"-rules", "-redis", "REDIS_URL", "-grpc", "-http", "-all-or-nothing", "-fail-open", "-response-headers", "-max-request-bytes", "-max-descriptors", "-max-entries", "-shutdown-timeout", "-log-json", "REDLIMIT_"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

func TestBadArguments(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no rules":   {nil, nil, "--rules is required"},
		"bad rules":  {[]string{"--rules", "../../testdata/missing.yaml"}, nil, "no such file"},
		"bad flag":   {[]string{"--nope"}, nil, "not defined"},
		"extra":      {[]string{"--rules", "x", "y"}, nil, "unexpected arguments"},
		"bad env":    {[]string{"--rules", "../../testdata/edge.yaml"}, map[string]string{"REDLIMIT_MAX_ENTRIES": "many"}, "REDLIMIT_MAX_ENTRIES"},
		"bad redis":  {[]string{"--rules", "../../testdata/edge.yaml"}, map[string]string{"REDIS_URL": "http://x"}, "scheme must be redis"},
		"bad listen": {[]string{"--rules", "../../testdata/edge.yaml", "--grpc", "256.0.0.1:1"}, nil, "256.0.0.1"},
	} {
		env := func(k string) string { return c.env[k] }
		err := run(context.Background(), c.args, env, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestServes(t *testing.T) {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	env := map[string]string{"REDLIMIT_RULES": "../../testdata/edge.yaml"}
	go func() {
		done <- run(ctx, []string{"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"}, func(k string) string { return env[k] }, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	var httpAddr string
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "http="); ok {
			httpAddr = v
		}
	}
	resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "1.2.3.4"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"overallCode":"OK"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
