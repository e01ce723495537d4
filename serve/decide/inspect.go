package decide

import (
	"context"
	"fmt"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/rules"
)

// Inspect returns the rule that a descriptor of entries matches in
// domain and, when the rule has limits, its key's state on each of them
// (Keyed.Status: nothing is charged). The rule is nil when none applies.
func (d *Decider) Inspect(ctx context.Context, domain string, entries []rules.Entry) (*rules.Rule, redlimit.Result, error) {
	req := Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}
	if err := d.validate(&req); err != nil {
		return nil, redlimit.Result{}, err
	}
	snap := d.cur.Load()
	if snap == nil {
		return nil, redlimit.Result{}, ErrNoRules
	}
	r, key := snap.set.MatchKey(domain, entries)
	p := snap.policies[r]
	if r == nil || p == nil {
		return r, redlimit.Result{}, nil
	}
	res, err := p.Key(key).Status(ctx)
	if err != nil {
		return r, redlimit.Result{}, fmt.Errorf("decide: %s: %w", r, err)
	}
	return r, res, nil
}
