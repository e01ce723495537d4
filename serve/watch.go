package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"

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
	dir, file := s.cfg.Rules, ""
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir, file = filepath.Dir(dir), filepath.Base(dir)
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
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if concerns(filepath.Base(ev.Name), file) {
				_ = s.Reload(ctx) // reported through the log and OnReload
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.cfg.Logger.Error("redlimit serve: watching the rules", "dir", dir, "err", err)
		}
	}
}

// concerns reports whether a change to name in the watched directory
// may change the rules: the rules file (file, when the rules are one
// file) or any YAML file (a directory), and Kubernetes' "..data" link
// and its targets, through which those files may point.
func concerns(name, file string) bool {
	if strings.HasPrefix(name, "..") {
		return true
	}
	if file != "" {
		return name == file
	}
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}
