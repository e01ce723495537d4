package serve_test

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/serve"
)

// TestRegistryTLSMetricsFlags sets the registry's, TLS's, the metrics' and
// the collector's settings from flags and the environment.
func TestRegistryTLSMetricsFlags(t *testing.T) {
	parse := func(args []string, env map[string]string) serve.Config {
		t.Helper()
		var c serve.Config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := serve.ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse(nil, nil)
	if c.HeartbeatTTL != 15*time.Second || c.Prefix != serve.DefaultPrefix || c.NoMetrics || c.TLSCert != "" || c.GCPercent != serve.DefaultGCPercent {
		t.Fatalf("defaults: %+v", c)
	}
	c = parse([]string{"--heartbeat-ttl=3s", "--tls-cert=c.pem", "--tls-key=k.pem", "--metrics=false", "--key-prefix={x}:"}, nil)
	if c.HeartbeatTTL != 3*time.Second || c.TLSCert != "c.pem" || c.TLSKey != "k.pem" || !c.NoMetrics || c.Prefix != "{x}:" {
		t.Fatalf("flags: %+v", c)
	}
	c = parse(nil, map[string]string{"REDLIMIT_METRICS": "false", "REDLIMIT_HEARTBEAT_TTL": "1m", "REDLIMIT_TLS_CERT": "c.pem", "REDLIMIT_GC_PERCENT": "200"})
	if !c.NoMetrics || c.HeartbeatTTL != time.Minute || c.TLSCert != "c.pem" || c.GCPercent != 200 {
		t.Fatalf("environment: %+v", c)
	}
	if c := parse([]string{"--metrics"}, map[string]string{"REDLIMIT_METRICS": "false"}); c.NoMetrics {
		t.Fatal("the flag given lost to the environment")
	}
}

// TestOnByDefaultFlagsHelp: --help says that the switches on by default
// (--metrics, --traffic, --traffic-keys) are on, as it says every other
// flag's default.
func TestOnByDefaultFlagsHelp(t *testing.T) {
	var c serve.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.RegisterFlags(fs)
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, name := range []string{"metrics", "traffic", "traffic-keys"} {
		f := fs.Lookup(name)
		if f == nil || f.DefValue != "true" {
			t.Fatalf("--%s: %+v, want a flag whose default is true", name, f)
		}
		var usage string
		for line := range strings.Lines(help.String()) {
			if usage != "" {
				usage = line
				break
			}
			if strings.HasPrefix(line, "  -"+name+"\n") {
				usage = "next"
			}
		}
		if !strings.HasSuffix(strings.TrimSpace(usage), "(default true)") {
			t.Errorf("--%s's help reads %q, want it to end with (default true)", name, usage)
		}
	}
}
