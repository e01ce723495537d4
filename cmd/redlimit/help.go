package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// helpCmd is "redlimit help".
var helpCmd = &command{
	name:     "help",
	summary:  "print this help, or a command's (as 'redlimit COMMAND -h' does)",
	synopsis: "[COMMAND]",
	noStore:  true,
	run:      cmdHelp,
	help: `
Prints the usage of redlimit on stdout, or with COMMAND that command's: its
synopsis, what it does and its flags. 'redlimit -h' and 'redlimit --help'
are 'redlimit help'.`,
}

// cmdHelp is "redlimit help": the usage, or a command's help.
func cmdHelp(_ context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet("redlimit help", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		c.printHelp(fs, cmd)
		return exitOK
	} else if err != nil {
		return c.usageError(cmd, err.Error())
	}
	switch fs.NArg() {
	case 0:
		usage(c.stdout)
		return exitOK
	case 1:
		target := lookup(fs.Arg(0))
		if target == nil {
			fmt.Fprintf(c.stderr, "redlimit help: unknown command %q\nrun 'redlimit help' for the list of commands\n", fs.Arg(0))
			return exitError
		}
		commandHelp(c.stdout, target)
		return exitOK
	}
	return c.usageError(cmd, fmt.Sprintf("unexpected argument %q", fs.Arg(1)))
}
