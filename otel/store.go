package redlimitotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redlimit/redlimit/redisstore"
)

// StatsSource is a store whose counters can be read: a *redisstore.Store.
type StatsSource interface {
	Stats() redisstore.Stats
}

// runSizeNames names the buckets of redisstore.Stats.RunSizes.
var runSizeNames = func() [redisstore.RunSizeBuckets]string {
	var n [redisstore.RunSizeBuckets]string
	for i := range n {
		lo, hi := 1<<i, 1<<(i+1)-1
		switch {
		case i == len(n)-1:
			n[i] = fmt.Sprintf("%d+", lo)
		case lo == hi:
			n[i] = fmt.Sprint(lo)
		default:
			n[i] = fmt.Sprintf("%d-%d", lo, hi)
		}
	}
	return n
}()

// WatchStore exports s's counters, read at each collection, with
// redlimit.store=name: redlimit.store.calls (calls made on limiters,
// refusal-cache answers included), redlimit.store.local_refusals (those
// the refusal cache answered), redlimit.store.script_runs by
// redlimit.run_size (how many calls batching put in each run) and
// redlimit.store.run_calls (the calls the runs carried: run_calls over
// script_runs is the mean run size). Unregister the returned
// Registration to stop.
func (o *Observer) WatchStore(name string, s StatsSource) (metric.Registration, error) {
	calls, err := o.meter.Int64ObservableCounter("redlimit.store.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls made on limiters (acquire, release, cancel, available), refusal-cache answers included."))
	if err != nil {
		return nil, err
	}
	local, err := o.meter.Int64ObservableCounter("redlimit.store.local_refusals", metric.WithUnit("{call}"),
		metric.WithDescription("Calls answered by the store's refusal cache without a round trip."))
	if err != nil {
		return nil, err
	}
	runs, err := o.meter.Int64ObservableCounter("redlimit.store.script_runs", metric.WithUnit("{run}"),
		metric.WithDescription("Limiter scripts sent to Redis, by how many calls each carried (batching)."))
	if err != nil {
		return nil, err
	}
	runCalls, err := o.meter.Int64ObservableCounter("redlimit.store.run_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls carried by the script runs, in all."))
	if err != nil {
		return nil, err
	}
	store := metric.WithAttributeSet(attribute.NewSet(AttrStore.String(name)))
	var bySize [redisstore.RunSizeBuckets]metric.ObserveOption
	for i := range bySize {
		bySize[i] = metric.WithAttributeSet(attribute.NewSet(AttrStore.String(name), AttrRunSize.String(runSizeNames[i])))
	}
	return o.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := s.Stats()
		ob.ObserveInt64(calls, st.Calls, store)
		ob.ObserveInt64(local, st.LocalRefusals, store)
		ob.ObserveInt64(runCalls, st.RunCalls, store)
		for i, n := range st.RunSizes {
			ob.ObserveInt64(runs, n, bySize[i])
		}
		return nil
	}, calls, local, runs, runCalls)
}
