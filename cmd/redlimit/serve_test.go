package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
	"github.com/redlimit/redlimit/serve"
)

// edgeRules is the service's own test rules file.
const edgeRules = "../../serve/testdata/edge.yaml"

// envOf returns a deps reading env (and nothing of the process's).
func envOf(env map[string]string) deps {
	return deps{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
}

// TestServeHelp: 'redlimit serve -h' documents every flag the service
// defines, however many are added to serve.Config, and how the
// environment sets them.
func TestServeHelp(t *testing.T) {
	r := call(t, deps{}, "serve", "-h")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("redlimit serve -h: %s", r)
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(serve.Config).RegisterFlags(fs)
	fs.Bool("log-json", false, "")
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(r.stdout, "\n  -"+f.Name+" ") && !strings.Contains(r.stdout, "\n  -"+f.Name+"\n") {
			t.Errorf("redlimit serve -h does not document --%s", f.Name)
		}
	})
	for _, s := range []string{"REDLIMIT_<NAME>", "REDLIMIT_MAX_ENTRIES", "$REDIS_URL", "SIGTERM"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("redlimit serve -h does not mention %s:\n%s", s, r.stdout)
		}
	}
}

// TestServeBadArguments: bad flags, environment and rules end the command
// at once with exit status 2 and one line saying what is wrong.
func TestServeBadArguments(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no rules":   {nil, nil, "redlimit serve: --rules is required (or $REDLIMIT_RULES)\nrun 'redlimit help serve' for usage\n"},
		"bad flag":   {[]string{"--nope"}, nil, "redlimit serve: flag provided but not defined: -nope\n"},
		"extra":      {[]string{"--rules", edgeRules, "y"}, nil, "redlimit serve: unexpected argument \"y\"\n"},
		"bad env":    {[]string{"--rules", edgeRules}, map[string]string{"REDLIMIT_MAX_ENTRIES": "many"}, "redlimit serve: REDLIMIT_MAX_ENTRIES: "},
		"no file":    {[]string{"--rules", filepath.Join(t.TempDir(), "missing.yaml")}, nil, "no such file"},
		"bad redis":  {[]string{"--rules", edgeRules}, map[string]string{"REDIS_URL": "http://x"}, "scheme must be redis"},
		"bad listen": {[]string{"--rules", edgeRules, "--grpc", "256.0.0.1:1"}, nil, "256.0.0.1"},
	} {
		r := call(t, envOf(c.env), append([]string{"serve"}, c.args...)...)
		// The service may log before it fails (rules loaded); the error is
		// the last line.
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		last := lines[len(lines)-1]
		if strings.HasPrefix(last, "run 'redlimit help") {
			last = strings.Join(lines[len(lines)-2:], "\n") + "\n"
		}
		if r.code != exitError || r.stdout != "" || !strings.HasPrefix(last, "redlimit serve: ") || !strings.Contains(last, c.want) {
			t.Errorf("%s: %s; want exit 2 and %q on stderr", name, r, c.want)
		}
	}
}

// serving is a 'redlimit serve' running in the background until the test
// ends.
type serving struct {
	*background
	http string // the HTTP address it printed
}

// startServe runs 'redlimit serve args' and waits for the line of addresses
// it prints once listening.
func startServe(t *testing.T, d deps, args ...string) serving {
	t.Helper()
	pr, pw := io.Pipe()
	g := start(t, d, pw, append([]string{"serve"}, args...)...)
	go func() {
		<-g.done
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("redlimit serve printed no addresses: %v; exit %d, stderr %q", err, g.code, g.stderr.String())
	}
	go io.Copy(io.Discard, pr)
	s := serving{background: g}
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "http="); ok {
			s.http = v
		}
	}
	if !strings.HasPrefix(line, "listening grpc=") || s.http == "" {
		t.Fatalf("redlimit serve printed %q", line)
	}
	return s
}

// ask posts one request for remote_address ip to the service's JSON API
// and returns its overall code.
func (s serving) ask(t *testing.T, ip string) string {
	t.Helper()
	resp, err := http.Post("http://"+s.http+"/json", "application/json",
		strings.NewReader(`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "`+ip+`"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, code := range []string{"OK", "OVER_LIMIT"} {
		if resp.StatusCode/100 != 5 && strings.Contains(string(body), `"overallCode":"`+code+`"`) {
			return code
		}
	}
	t.Fatalf("POST /json: %d %s", resp.StatusCode, body)
	return ""
}

// TestServe: 'redlimit serve' answers Envoy's request as JSON on loopback,
// rules and addresses from the environment, and stops on its context's
// end (SIGINT, SIGTERM) with exit status 0.
func TestServe(t *testing.T) {
	env := map[string]string{"REDLIMIT_RULES": edgeRules, "REDLIMIT_HTTP": "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--grpc", "127.0.0.1:0", "--log-json"}, pw, &stderr, envOf(env))
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	s := serving{http: strings.TrimPrefix(strings.Fields(line)[2], "http=")}
	if got := s.ask(t, "1.2.3.4"); got != "OK" {
		t.Errorf("first request: %s, want OK", got)
	}
	if got := s.ask(t, "50.0.0.5"); got != "OVER_LIMIT" {
		t.Errorf("a request the rules refuse: %s, want OVER_LIMIT", got)
	}
	cancel()
	if c := <-code; c != exitOK {
		t.Fatalf("exit %d after its context ended, stderr %q", c, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "{") {
		t.Errorf("--log-json: stderr %q is not JSON lines", stderr.String())
	}
}

// TestServeSharesRedis: two instances on one Redis (one told by
// $REDIS_URL, as the other commands read it, one by $REDLIMIT_REDIS) share
// the limit: 3 a day for an address, the fourth request refused whichever
// instance it reaches.
func TestServeSharesRedis(t *testing.T) {
	srv := redistest.Start(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	// A sliding log, not the fixed window of envoyproxy/ratelimit's
	// format, so that no window boundary falls within the test.
	if err := os.WriteFile(rules, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 3, algorithm: sliding-log}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startServe(t, envOf(map[string]string{"REDIS_URL": srv.URL()}), "--rules", rules, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0")
	// REDLIMIT_REDIS, the service's own variable, wins over REDIS_URL.
	b := startServe(t, envOf(map[string]string{"REDIS_URL": "http://not-this-one", "REDLIMIT_REDIS": srv.URL()}), "--rules", rules, "--grpc", "-", "--http", "127.0.0.1:0")
	for i, s := range []serving{a, b, a} {
		if got := s.ask(t, "9.9.9.9"); got != "OK" {
			t.Fatalf("request %d: %s, want OK", i+1, got)
		}
	}
	if got := b.ask(t, "9.9.9.9"); got != "OVER_LIMIT" {
		t.Errorf("fourth request on the other instance: %s, want OVER_LIMIT (the limit is not shared)", got)
	}
	if got := b.ask(t, "8.8.8.8"); got != "OK" {
		t.Errorf("another address: %s, want OK", got)
	}
}
