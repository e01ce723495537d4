package serve

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// handleAudit answers GET /v1/audit?limit=N: the last N changes made
// through the API (default 100, at most the audit's cap), newest first.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	n := 100
	if q := r.URL.Query().Get("limit"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil || v < 1 || v > maxAudit {
			problemField(w, http.StatusBadRequest, "limit", "limit: "+strconv.Quote(q)+" is not a number 1.."+strconv.Itoa(maxAudit))
			return
		}
		n = v
	}
	recs, err := s.api.store.audit(r.Context(), n)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, "the rules store: "+err.Error())
		return
	}
	out := make([]json.RawMessage, 0, len(recs))
	for _, rec := range recs {
		if json.Valid([]byte(rec)) {
			out = append(out, json.RawMessage(rec))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": out})
}
