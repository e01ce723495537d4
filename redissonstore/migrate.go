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
	// Dropped counts permits that did not fit the native log at their grant
	// time: only a Redisson state holding more than rate permits in one
	// window (which Redisson's own lost-update bugs can produce) has any.
	Dropped int64
}

// migrationClient is the client id of Overall replays (ignored by Overall
// limiters, but a Key needs a valid one).
const migrationClient = "redisson-migration"

// Migrate converts the Redisson rate limiter called name into a native
// redlimit limiter of the same name in native (package redisstore), so that
// the limit holds across the switch: the config is stored with
// SetResetState (replacing any native limiter of that name) and every grant
// still in the window is replayed into the native log at its own grant time,
// through a store on native's client and prefix whose clock reads that time
// (redisstore.WithClock). The native limiter then refuses exactly as long as
// Redisson would have, up to the clocks: Redisson's grant times are its
// clients' clocks, while a redisstore without WithClock reads Redis TIME, so
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
	if err := redlimit.ValidateName(name); err != nil {
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
	rc := clock.NewFake(time.Time{})                                                                                                            // set to each grant's instant; replays never wait
	replay, err := redisstore.New(native.Client(), redisstore.WithPrefix(native.Prefix()), redisstore.WithClock(rc), redisstore.AllowRetries()) // native accepted its client
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
		ms := MigratedState{Client: st.Client}
		for _, g := range st.Grants {
			if g.Expired || g.Err != nil || g.Permits == 0 {
				continue
			}
			rc.Set(g.At)
			n := min(g.Permits, cfg.Rate)
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
