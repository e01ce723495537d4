package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/bench/rls"
)

func TestPrintRules(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--print-rules"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), rls.Rules) {
		t.Errorf("printed %q", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--a", "redlimit", "--b", "envoy=127.0.0.1:1"},
		{"--a", "redlimit=127.0.0.1:1", "--b", "=127.0.0.1:2"},
		{"--a", "a=127.0.0.1:1", "--b", "b=127.0.0.1:2", "--callers", "1,x"},
		{"--a", "a=127.0.0.1:1", "--b", "b=127.0.0.1:2", "--rounds", "0"},
		{"--a", "a=127.0.0.1:1", "--b", "b=127.0.0.1:2", "extra"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if err == nil || out.Len() != 0 {
			t.Errorf("%s: err %v, out %q", strings.Join(args, " "), err, out.String())
		}
	}
}
