package serve

import (
	"slices"

	"github.com/redlimit/redlimit"
)

// extras are the parts of a Server around its decisions: the instance
// registry, TLS and the metrics.
type extras struct {
	reg   *registry
	certs *certFiles // nil: plaintext
	met   *metrics   // nil: Config.NoMetrics
}

// newExtras checks and loads the TLS files and makes the metrics, whose
// observer it adds to cfg's policy options; call before the Decider.
func newExtras(cfg *Config) (extras, error) {
	var x extras
	if err := checkRegistry(cfg); err != nil {
		return x, err
	}
	var err error
	if x.certs, err = newCertFiles(cfg); err != nil {
		return x, err
	}
	if !cfg.NoMetrics {
		x.met = newMetrics(cfg)
		cfg.Decide.PolicyOptions = append(slices.Clip(cfg.Decide.PolicyOptions), redlimit.WithObserver(x.met.policies))
	}
	return x, nil
}

// setup finishes the extras of s, once it has its Decider.
func (x *extras) setup(s *Server) {
	x.reg = newRegistry(&s.cfg, s.RulesVersion)
	if x.met != nil {
		x.met.register(s)
	}
}
