package main

import (
	"context"
	"fmt"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redissonstore"
)

// migrateCmd is "redlimit migrate".
var migrateCmd = &command{
	name:     "migrate",
	summary:  "turn a Redisson limiter into a native one, permits in use and all",
	synopsis: "NAME [--layout current|legacy] [--client ID]...",
	wantName: true,
	run:      cmdMigrate,
	help: `
Turns the Redisson RRateLimiter called NAME (same Redis) into a native
limiter with the same config and the permits still in use, so the limit
holds across the switch. Stop the Java clients first; docs/redisson.md has
the steps. The Redisson keys are left in place.`,
}

// cmdMigrate is "redlimit migrate": a Redisson limiter becomes a native one
// with the same config and the permits still in use.
func cmdMigrate(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	var rf redissonFlags
	fs := c.flagSet(cmd, &sf)
	fs.StringVar(&rf.layout, "layout", "current", "the Redisson layout: `current` (Bc0I members) or legacy (fI)")
	fs.Var(&rf.clients, "client", "a PER_CLIENT client `ID` to carry over (repeatable; default: every client found)")
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	rs, native, closeStore, err := c.openRedisson(&sf, &rf)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
	// A Redis that does not answer fails within --timeout; the migration
	// itself, as long as the log it replays, is bounded per call only.
	pctx, cancel := sf.bound(ctx, 0)
	defer cancel()
	if err := native.Client().Ping(pctx).Err(); err != nil {
		return c.fail(cmd, fmt.Errorf("%w: %w", redlimit.ErrUnavailable, err))
	}
	m, err := rs.Migrate(ctx, name, native, rf.clients...)
	if err != nil {
		return c.fail(cmd, err)
	}
	if sf.json {
		return c.printJSON(cmd, migrationToJSON(name, &m))
	}
	fmt.Fprintf(c.stdout, "migrated %q: %s\n", name, m.Config)
	for _, st := range m.States {
		who := "Overall"
		if st.Client != "" {
			who = fmt.Sprintf("client %q", st.Client)
		}
		fmt.Fprintf(c.stdout, "  %s: %s replayed, %s carried", who, plural(int64(st.Grants), "grant"), plural(st.Carried, "permit"))
		if st.Dropped > 0 {
			fmt.Fprintf(c.stdout, ", %s dropped (more than the rate in one window)", plural(st.Dropped, "permit"))
		}
		fmt.Fprintln(c.stdout)
	}
	return exitOK
}

// migrationJSON is "migrate --json".
type migrationJSON struct {
	Name   string              `json:"name"`
	Config configJSON          `json:"config"`
	AtMS   int64               `json:"at_ms"`
	States []migratedStateJSON `json:"states"`
}

type migratedStateJSON struct {
	Client  string `json:"client,omitempty"`
	Grants  int    `json:"grants"`
	Carried int64  `json:"carried"`
	Dropped int64  `json:"dropped"`
}

func migrationToJSON(name string, m *redissonstore.Migration) migrationJSON {
	out := migrationJSON{Name: name, Config: toJSON(m.Config), AtMS: m.At.UnixMilli(), States: []migratedStateJSON{}}
	for _, st := range m.States {
		out.States = append(out.States, migratedStateJSON{Client: st.Client, Grants: st.Grants, Carried: st.Carried, Dropped: st.Dropped})
	}
	return out
}
