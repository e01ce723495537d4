// Package httplimit guards net/http handlers with keyed redlimit policies:
// a request passes only if every rule's policy grants it for the
// request's key (client IP, API key, user, route); otherwise it gets a 429
// with the IETF RateLimit headers, a Retry-After and an RFC 9457 problem
// body. It uses the standard library only, so it fits any router that
// takes an http.Handler (chi, gorilla/mux, echo's WrapMiddleware).
//
//	p, _ := redlimit.NewPolicy(store, "api", []redlimit.Config{redlimit.PerSecond(10)})
//	ip, _ := httplimit.ClientIP(httplimit.ClientIPConfig{})
//	mw, _ := httplimit.New([]httplimit.Rule{{Policy: p, Key: ip}})
//	http.ListenAndServe(addr, mw.Handler(mux))
package httplimit
