// Package traffic counts what a set of redlimit serve instances grants
// and refuses, per policy and per second, and the hottest keys of each
// policy, so a dashboard shows every instance's traffic from any one of
// them.
//
// A Recorder is a redlimit.Observer: give it to the policies
// (decide.Options.Observer), run Run, and every second it adds what it
// saw to the shared Redis, where the counts of all instances add up:
//
//	<prefix>traffic:s:<unix second>             hash  <policy>\x00g / \x00r -> count
//	<prefix>traffic:top:<unix minute>:<policy>  zset  key -> count, kept to TopKeys
//
// Every key expires after Retention. Without Redis the counts stay in the
// process. Handler serves them: GET /v1/traffic, /v1/traffic/stream (server-
// sent events) and /v1/traffic/top.
package traffic
