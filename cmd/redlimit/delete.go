package main

import (
	"context"
	"fmt"

	"github.com/redlimit/redlimit"
)

// deleteCmd is "redlimit delete".
var deleteCmd = &command{
	name:     "delete",
	summary:  "remove a limiter (or keyed policy), its config and its state",
	synopsis: "NAME",
	wantName: true,
	run:      cmdDelete,
	help: `
Removes the limiter, its config and its state, and the keyed policy of the
name with its keys' states, if any; prints whether either existed.`,
}

// cmdDelete is "redlimit delete".
func cmdDelete(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	ctx, store, done, err := c.openBounded(ctx, &sf, 0)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	l, err := redlimit.New(store, name, redlimit.WithClock(c.clock()))
	if err != nil {
		return c.fail(cmd, err)
	}
	c.noteMemory(cmd)
	existed, err := l.Delete(ctx)
	if err != nil {
		return c.fail(cmd, err)
	}
	// A keyed policy of the name goes too.
	if ps, ok := store.(redlimit.PolicyStore); ok {
		had, err := ps.DeletePolicy(ctx, name)
		if err != nil {
			return c.fail(cmd, err)
		}
		existed = existed || had
	}
	if sf.json {
		return c.printJSON(cmd, struct {
			Name    string `json:"name"`
			Existed bool   `json:"existed"`
		}{name, existed})
	}
	if existed {
		fmt.Fprintf(c.stdout, "deleted %q\n", name)
	} else {
		fmt.Fprintf(c.stdout, "%q did not exist\n", name)
	}
	return exitOK
}
