package rules_test

import (
	"fmt"

	"github.com/redlimit/redlimit/serve/rules"
)

func ExampleParse() {
	d, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: api_key
    limits:
      - {requests_per_unit: 10, unit: second, algorithm: token-bucket, burst: 50}
      - {requests_per_unit: 1000, unit: hour}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	set, _ := rules.NewSet(d)
	r := set.Match("edge", []rules.Entry{{Key: "api_key", Value: "k-123"}})
	for _, l := range r.Limits {
		fmt.Println(r.Path, l.Config)
	}
	_, err = rules.Parse("bad.yaml", []byte("domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	fmt.Println(err)
	// Output:
	// api_key 10 per 1s burst 50 (token-bucket, overall)
	// api_key 1000 per 1h0m0s (fixed-window, overall)
	// bad.yaml:4: descriptors[0].rate_limit.unit: unknown unit "fortnight" (second, minute, hour, day, week, month, year)
}

func ExampleCompile() {
	d, _ := rules.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 10}\n"))
	file, _ := rules.NewSet(d)
	per := int64(100)
	r, err := rules.Compile("edge", "api_key=vip", rules.Spec{Limits: []rules.LimitSpec{{Rate: &per, Interval: "1s", Algorithm: "token-bucket"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	set, _ := file.With([]*rules.Rule{r}, "v1")
	for _, key := range []string{"vip", "k-123"} {
		m := set.Match("edge", []rules.Entry{{Key: "api_key", Value: key}})
		fmt.Println(key, m.Path, m.Limits[0].Config, m.API)
	}
	_, err = rules.Compile("edge", "api_key", rules.Spec{Limits: []rules.LimitSpec{{Rate: &per, Interval: "soon"}}})
	fmt.Println(err)
	// Output:
	// vip api_key=vip 100 per 1s burst 100 (token-bucket, overall) true
	// k-123 api_key 10 per 1s (fixed-window, overall) false
	// (api): limits[0].interval: "soon" is not a positive Go duration (1s, 1500ms, 2h)
}
