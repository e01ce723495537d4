package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit"
)

// streamWindow is how many recent seconds each streamed event carries:
// counts flushed late by another instance correct the seconds already
// sent (the client keeps the latest value of each second).
const streamWindow = 5

// Handler serves the counts:
//
//	GET /v1/traffic?seconds=N          the last N seconds (default 60), as a Series
//	GET /v1/traffic/stream             server-sent events, one a second, each a
//	                                   Series of the last 5 seconds
//	GET /v1/traffic/top?policy=P&n=N   the N (default 10) hottest keys of P
//	                                   (404 with Options.NoTopKeys)
//
// A stream ends when the client goes or stop is closed (the server
// drains). Errors are application/problem+json.
func (r *Recorder) Handler(stop <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/traffic", r.handleSeries)
	mux.HandleFunc("GET /v1/traffic/stream", func(w http.ResponseWriter, req *http.Request) { r.handleStream(w, req, stop) })
	mux.HandleFunc("GET /v1/traffic/top", r.handleTop)
	return mux
}

func intParam(req *http.Request, name string, def int) (int, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &redlimit.ArgumentError{Arg: name, Reason: fmt.Sprintf("%q is not a whole number", v), Kind: redlimit.ErrInvalidArgument}
	}
	return n, nil
}

func (r *Recorder) handleSeries(w http.ResponseWriter, req *http.Request) {
	n, err := intParam(req, "seconds", 60)
	if err == nil && (n < 1 || time.Duration(n)*time.Second > r.opts.Retention) {
		err = &redlimit.ArgumentError{Arg: "seconds", Reason: fmt.Sprintf("must be 1..%d", int(r.opts.Retention/time.Second)), Kind: redlimit.ErrInvalidArgument}
	}
	if err != nil {
		fail(w, err)
		return
	}
	s, err := r.Series(req.Context(), n)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, s)
}

func (r *Recorder) handleTop(w http.ResponseWriter, req *http.Request) {
	n, err := intParam(req, "n", 10)
	if err == nil && (n < 1 || n > r.opts.TopKeys) {
		err = &redlimit.ArgumentError{Arg: "n", Reason: fmt.Sprintf("must be 1..%d", r.opts.TopKeys), Kind: redlimit.ErrInvalidArgument}
	}
	policy := req.URL.Query().Get("policy")
	if err == nil && policy == "" {
		err = &redlimit.ArgumentError{Arg: "policy", Reason: "is required", Kind: redlimit.ErrInvalidArgument}
	}
	if err != nil {
		fail(w, err)
		return
	}
	keys, err := r.Top(req.Context(), policy, n)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"policy": PolicyName(policy), "keys": keys})
}

func (r *Recorder) handleStream(w http.ResponseWriter, req *http.Request, stop <-chan struct{}) {
	if r.streams.Add(1) > int64(r.opts.MaxStreams) {
		r.streams.Add(-1)
		w.Header().Set("Retry-After", "10")
		fail(w, &errBusy{max: r.opts.MaxStreams})
		return
	}
	defer r.streams.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not hold events back
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	ctx := req.Context()
	for {
		s, err := r.Series(ctx, streamWindow)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", jsonString(err.Error()))
		} else {
			b, _ := json.Marshal(s)
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if rc.Flush() != nil {
			return
		}
		tick, cancel := r.opts.Clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			cancel()
			return
		case <-stop:
			cancel()
			return
		case <-tick:
		}
	}
}

// errBusy refuses a stream over MaxStreams; it matches
// redlimit.ErrUnavailable (503).
type errBusy struct{ max int }

func (e *errBusy) Error() string {
	return fmt.Sprintf("traffic: %d event streams are open, the most allowed; use GET /v1/traffic", e.max)
}
func (e *errBusy) Is(target error) bool { return target == redlimit.ErrUnavailable }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// fail writes err as an RFC 9457 problem: 400 for bad input, 503 when the
// store failed.
func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, redlimit.ErrInvalidArgument):
		code = http.StatusBadRequest
	case errors.Is(err, redlimit.ErrUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrNoTopKeys):
		code = http.StatusNotFound
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(code), "status": code, "detail": err.Error()})
}
