package serve

import "net/http"

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	return http.NewServeMux()
}
