package decide_test

import (
	"context"
	"fmt"

	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

func Example() {
	dom, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`))
	if err != nil {
		panic(err)
	}
	set, _ := rules.NewSet(dom)
	d, _ := decide.New(memstore.New(), decide.Options{})
	if err := d.SetRules(context.Background(), set); err != nil {
		panic(err)
	}
	req := decide.Request{Domain: "edge", Descriptors: []decide.Descriptor{
		{Entries: []rules.Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
	}}
	for range 3 {
		r, err := d.Decide(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Overall, r.Statuses[0].Remaining, r.Statuses[0].Limit.Config.Rate, r.Statuses[0].Limit.Unit)
	}
	// Output:
	// OK 1 2 hour
	// OK 0 2 hour
	// OVER_LIMIT 0 2 hour
}

func ExampleDecider_Inspect() {
	dom, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token-bucket}
`))
	if err != nil {
		panic(err)
	}
	set, _ := rules.NewSet(dom)
	d, _ := decide.New(memstore.New(), decide.Options{})
	if err := d.SetRules(context.Background(), set); err != nil {
		panic(err)
	}
	entries := []rules.Entry{{Key: "remote_address", Value: "192.0.2.1"}}
	d.Decide(context.Background(), decide.Request{Domain: "edge", Descriptors: []decide.Descriptor{{Entries: entries}}, Hits: 2})
	for range 2 { // nothing charged
		r, res, err := d.Inspect(context.Background(), "edge", entries)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Path, res.Allowed, res.Remaining)
	}
	// Output:
	// remote_address true 3
	// remote_address true 3
}
