// Package dashboard serves redlimit serve's web dashboard: one page and
// its bundle, embedded in the binary, so it works offline and fetches
// nothing from elsewhere. The page reads the REST API of the instance
// serving it (/v1/rules, /v1/instances, /v1/traffic, ...) and writes
// with the admin token typed into it.
//
// The sources are in web/ (plain JavaScript modules and uPlot for the
// chart); assets/ is their bundle, committed because go build cannot run
// npm. Rebuild it with go generate after changing web/.
package dashboard

//go:generate sh -c "cd web && npm ci --no-audit --no-fund && npm run build"

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard's files at the root of the path it gets
// (mount it with http.StripPrefix("/dashboard", ...)). Its Content-
// Security-Policy lets the page load only its own files and talk only to
// its own server.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
