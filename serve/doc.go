// Package serve is redlimit's rate-limit service: Envoy's rate-limit
// service (gRPC envoy.service.ratelimit.v3.RateLimitService, a drop-in
// for envoyproxy/ratelimit) and the same request as JSON over HTTP for
// any other language, deciding from a rules file in envoyproxy/ratelimit's
// YAML format (package rules) that reloads when it changes, on any
// redlimit.PolicyStore (package decide).
//
// It is its own Go module so that gRPC, the Envoy protos, YAML and
// fsnotify never enter the core library's go.mod. Run starts it from a
// Config; `redlimit serve` (cmd/redlimit) is the command around Run.
package serve
