package main

import (
	"context"
	"fmt"
)

// deleteCmd is "redlimit delete".
var deleteCmd = &command{
	name:     "delete",
	summary:  "remove a limiter, its config and its state",
	synopsis: "NAME",
	wantName: true,
	run:      cmdDelete,
	help: `
Removes the limiter, its config and its state; prints whether it existed.`,
}

// cmdDelete is "redlimit delete".
func cmdDelete(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	ctx, l, done, err := c.openLimiter(ctx, cmd, &sf, name, 0)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	existed, err := l.Delete(ctx)
	if err != nil {
		return c.fail(cmd, err)
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
