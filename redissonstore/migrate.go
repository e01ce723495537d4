package redissonstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/redisstore"
)

// Migration reports what Migrate carried over.
type Migration struct {
	// Config is the config stored in the native store (with its new epoch).
	Config redlimit.Config
	// At is the store clock's time the Redisson state was read at.
	At     time.Time
	States []MigratedState
}

// MigratedState is one Overall or PER_CLIENT state carried over.
type MigratedState struct {
	// Client is the PER_CLIENT id ("" for Overall): in the native store the
	// state belongs to redlimit.Key{Client: Client}, so a Go client that
	// takes over from that Redisson client uses redlimit.WithClientID(Client).
	Client string
	// Grants is how many grants still in the window were replayed, Carried
	// their permits.
	Grants  int
	Carried int64
	// Dropped counts permits of grants still in the window that were not
	// carried: the oldest, when the log holds more than Redisson counts as
	// in use (more than rate permits after a keep-state rate cut or a lost
	// update, or grants whose permits a Java release gave back to the
	// counter).
	Dropped int64
}

// migrationClient is the client id of Overall replays (ignored by Overall
// limiters, but a Key needs a valid one).
const migrationClient = "redisson-migration"

// Migrate converts the Redisson rate limiter called name into a native
// redlimit limiter of the same name in native (package redisstore), so that
// the limit holds across the switch: the config is stored with
// SetResetState (replacing any native limiter of that name) and the grants
// still in the window are replayed into the native log at their own grant
// times, through a store on native's client and prefix whose clock reads
// that time (redisstore.WithTimeSource). Only the permits Redisson counts as in
// use are carried (at most rate: its counter says how many, a Java release
// having handed some back), taken from the newest grants, which Redisson
// frees last. The native limiter then refuses exactly as long as
// Redisson would have, up to the clocks: Redisson's grant times are its
// clients' clocks, while a redisstore without WithTimeSource reads Redis TIME, so
// a Java clock behind Redis by d frees the carried permits d early (ahead: d
// late).
//
// PER_CLIENT states are carried for clients, or when none are given for
// every client id ClientIDs finds. Migrate reads the Redisson state in one
// snapshot and leaves it in place: Java clients still acquiring through
// Redisson meanwhile are not seen (stop them first; docs/redisson.md has the
// steps). Migrate does not delete the Redisson keys (Delete does).
func (s *Store) Migrate(ctx context.Context, name string, native *redisstore.Store, clients ...string) (Migration, error) {
	if native == nil {
		return Migration{}, &redlimit.ArgumentError{Arg: "native store", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return Migration{}, err
	}
	cfg, err := s.Config(ctx, name)
	if err != nil {
		return Migration{}, err
	}
	if cfg.Mode == redlimit.PerClient && len(clients) == 0 {
		if clients, err = s.ClientIDs(ctx, name); err != nil {
			return Migration{}, err
		}
	}
	in, err := s.Inspect(ctx, name, clients...)
	if err != nil {
		return Migration{}, err
	}
	if in.ConfigErr != nil {
		return Migration{}, in.ConfigErr
	}
	cfg = in.Config
	stored, _, err := native.SetConfig(ctx, name, cfg, redlimit.SetResetState)
	if err != nil {
		return Migration{}, fmt.Errorf("redissonstore: migrating %q, storing the config: %w", name, err)
	}
	rc := clock.NewFake(time.Time{}) // set to each grant's instant; replays never wait
	// The native store accepted its client already.
	replay, err := redisstore.New(native.Client(), redisstore.WithPrefix(native.Prefix()), redisstore.WithTimeSource(rc), redisstore.AllowRetries())
	if err != nil {
		return Migration{}, err
	}
	out := Migration{Config: stored, At: in.Now}
	for _, st := range in.States {
		if (cfg.Mode == redlimit.Overall) != (st.Client == "") {
			continue
		}
		key := redlimit.Key{Name: name, Client: migrationClient}
		if st.Client != "" {
			key.Client = st.Client
		}
		carry := carried(st, cfg.Rate)
		ms := MigratedState{Client: st.Client}
		for i, g := range st.Grants {
			if g.Expired || g.Err != nil || g.Permits == 0 {
				continue
			}
			n := carry[i]
			if n == 0 {
				ms.Dropped += g.Permits
				continue
			}
			rc.Set(g.At)
			d, err := replay.Acquire(ctx, key, stored, n, 0)
			if err != nil {
				return out, fmt.Errorf("redissonstore: migrating %q, replaying a grant of %d at %s: %w", name, n, g.At, err)
			}
			if !d.Granted && d.Remaining > 0 {
				n = d.Remaining
				if d, err = replay.Acquire(ctx, key, stored, n, 0); err != nil {
					return out, fmt.Errorf("redissonstore: migrating %q, replaying a grant of %d at %s: %w", name, n, g.At, err)
				}
			}
			if d.Granted {
				ms.Grants++
				ms.Carried += n
				ms.Dropped += g.Permits - n
			} else {
				ms.Dropped += g.Permits
			}
		}
		out.States = append(out.States, ms)
	}
	return out, nil
}

// carried says how many permits of each grant of st to carry over: the
// permits Redisson counts as in use (rate minus what its counter leaves,
// which excludes what a Java release handed back to the counter alone; at
// most rate), taken from the newest grants in the window first, so that the
// native limiter frees them no earlier than Redisson would have. The rest
// (the oldest, when the log holds more than rate after a keep-state rate
// cut or a lost update) is dropped.
func carried(st State, rate int64) []int64 {
	budget := min(rate, max(0, rate-st.Left))
	out := make([]int64, len(st.Grants))
	for i := len(st.Grants) - 1; i >= 0 && budget > 0; i-- {
		g := st.Grants[i]
		if g.Expired || g.Err != nil || g.Permits <= 0 {
			continue
		}
		out[i] = min(g.Permits, budget)
		budget -= out[i]
	}
	return out
}
