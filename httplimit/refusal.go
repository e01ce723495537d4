package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit/internal/ratelimitheader"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Violated []string `json:"violated-policies,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // plain strings and ints: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// defaultRefusal answers 429 with the draft's quota-exceeded problem.
func defaultRefusal(w http.ResponseWriter, _ *http.Request, d *Decision) {
	detail := fmt.Sprintf("retry in %d s", max(1, ratelimitheader.Seconds(d.RetryAfter)))
	switch {
	case errors.Is(d.Err, redlimit.ErrQueueFull):
		detail = "the queue is full; " + detail
	case errors.Is(d.Err, redlimit.ErrWouldExceedDeadline):
		detail = "the wait would be too long; " + detail
	}
	writeProblem(w, problem{
		Type:     ratelimitheader.QuotaExceededType,
		Title:    "Request cannot be satisfied as assigned quota has been exceeded",
		Status:   http.StatusTooManyRequests,
		Detail:   detail,
		Violated: d.Violated(),
	})
}

// defaultError answers 400 for a request without a key or cost, 503 for
// a store that cannot be reached (FailClosed) and 500 otherwise. Store
// errors are not shown to the client: they may name internal hosts.
func defaultError(w http.ResponseWriter, _ *http.Request, err error) {
	p := problem{Type: "about:blank", Status: http.StatusInternalServerError}
	switch {
	case errors.Is(err, ErrBadRequest):
		p.Status, p.Detail = http.StatusBadRequest, err.Error()
	case errors.Is(err, redlimit.ErrUnavailable):
		p.Status, p.Detail = http.StatusServiceUnavailable, "the rate limiter is unavailable"
		ratelimitheader.SetRetryAfter(w.Header(), 0)
	default:
		p.Detail = "the rate limiter failed"
	}
	p.Title = http.StatusText(p.Status)
	writeProblem(w, p)
}
