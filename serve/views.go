package serve

import (
	"net/http"
	"slices"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/dashboard"
	"github.com/redlimit/redlimit/serve/redissonview"
	"github.com/redlimit/redlimit/serve/traffic"
)

// newTraffic makes the traffic recorder (nil with NoTraffic) and adds it
// to the observers of cfg's policies; call before the Decider.
func newTraffic(cfg *Config) (*traffic.Recorder, error) {
	if cfg.NoTraffic {
		return nil, nil
	}
	// The real clock: the counts are dated by the policies' own clock
	// (Event.Start); this one only paces the flushes and the stream.
	tr, err := traffic.New(traffic.Options{Redis: cfg.RedisClient, Prefix: cfg.Prefix, Logger: cfg.Logger, NoTopKeys: cfg.NoTrafficKeys})
	if err != nil {
		return nil, err
	}
	cfg.Decide.PolicyOptions = append(slices.Clip(cfg.Decide.PolicyOptions), redlimit.WithObserver(tr))
	return tr, nil
}

// handleViews adds the read-only views of the dashboard to mux:
//
//	GET /v1/traffic, /v1/traffic/stream, /v1/traffic/top  (package traffic)
//	GET /v1/redisson  the Redisson limiters on RedisClient
//	GET /dashboard/   the dashboard, when Config.Dashboard is set
func (s *Server) handleViews(mux *http.ServeMux) {
	if s.traffic != nil {
		th := s.traffic.Handler(s.draining)
		mux.Handle("GET /v1/traffic", th)
		mux.Handle("GET /v1/traffic/", th)
	}
	mux.Handle("GET /v1/redisson", redissonview.Handler(s.cfg.RedisClient))
	if s.cfg.Dashboard {
		mux.Handle("GET /dashboard/", http.StripPrefix("/dashboard", dashboard.Handler()))
		mux.Handle("GET /dashboard", http.RedirectHandler("/dashboard/", http.StatusMovedPermanently))
	}
}
