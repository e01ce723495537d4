package rules_test

import (
	"testing"

	"github.com/redlimit/redlimit/serve/rules"
)

// BenchmarkMatchKey matches a descriptor of two entries against rules
// with values, as every decision does; the path's value is longer than
// a short IP address.
func BenchmarkMatchKey(b *testing.B) {
	d, err := rules.Parse("r.yaml", []byte("domain: d\ndescriptors:\n  - key: header_match\n    value: api\n    descriptors:\n      - key: path\n        rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		b.Fatal(err)
	}
	set, err := rules.NewSet(d)
	if err != nil {
		b.Fatal(err)
	}
	entries := []rules.Entry{{Key: "header_match", Value: "api"}, {Key: "path", Value: "/v1/accounts/1234567890/transactions"}}
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := set.MatchKey("d", entries); r == nil {
			b.Fatal("no match")
		}
	}
}
