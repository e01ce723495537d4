package serve

import (
	"context"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// Watching is closed once Serve watches the rules for changes: a change
// made after it is seen.
func (s *Server) Watching() <-chan struct{} { return s.watching }

// watch reloads the rules whenever something changes in their directory
// (the file's own, or the rules directory), until ctx ends. Watching the
// directory rather than the file sees an editor's rename-over and the
// swap of the "..data" symbolic link by which Kubernetes updates a
// mounted ConfigMap. Reload skips content it has seen, so a burst of
// events costs a few reads of the files.
func (s *Server) watch(ctx context.Context) error {
	dir := s.cfg.Rules
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(dir)
		if err != nil {
			w.Close()
		}
	}
	close(s.watching)
	if err != nil {
		s.cfg.Logger.Error("redlimit serve: cannot watch the rules, they will not reload", "dir", dir, "err", err)
		<-ctx.Done()
		return nil
	}
	defer w.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			_ = s.Reload(ctx) // reported through the log and OnReload
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.cfg.Logger.Error("redlimit serve: watching the rules", "dir", dir, "err", err)
		}
	}
}
