package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/rules"
)

// apiRules is what a Server keeps of the rules set through the API.
type apiRules struct {
	store  ruleStore
	tokens []namedToken

	// mu guards what follows and serializes putting a merged set in
	// force, so the file's and the API's changes never undo each other.
	mu   sync.Mutex
	file *rules.Set // the file's rules, last loaded
	list []*rules.Rule
	recs map[string]apiRecord // by field
	// digest identifies list's content; version is the store's version
	// it was read at ("" before the first read).
	digest, version string
	lastErr         string // the last failure to follow the store, logged once
	// skipped are the records of the last read that did not check out,
	// each "domain/path: why", for /readyz.
	skipped []string
}

// apiRecord is a rule set through the API as the store keeps it.
type apiRecord struct {
	Domain string     `json:"domain"`
	Path   string     `json:"path"`
	Spec   rules.Spec `json:"rule"`
	By     string     `json:"by"`
	At     time.Time  `json:"at"`
}

// field is the store's field of a rule: domain, NUL, path.
func field(domain, path string) string { return domain + "\x00" + path }

// initAPI prepares the API's store and tokens (New calls it).
func (s *Server) initAPI() error {
	toks, err := tokens(&s.cfg)
	if err != nil {
		return err
	}
	s.api.tokens = toks
	if s.cfg.RedisClient != nil {
		s.api.store = newRedisRules(s.cfg.RedisClient, s.cfg.Prefix)
	} else {
		s.api.store = &memRules{}
	}
	return nil
}

// setFileRules puts in force the file's rules set merged with the rules
// set through the API.
func (s *Server) setFileRules(ctx context.Context, set *rules.Set) error {
	s.api.mu.Lock()
	defer s.api.mu.Unlock()
	merged, err := set.With(s.api.list, s.api.digest)
	if err == nil {
		err = s.dec.SetRules(ctx, merged)
	}
	if err != nil {
		return err
	}
	s.api.file = set
	return nil
}

// syncAPI reads the rules set through the API if the store's version
// moved and puts them in force with the file's. force reads them even if
// it did not.
func (s *Server) syncAPI(ctx context.Context, force bool) error {
	if !force {
		v, err := s.api.store.version(ctx)
		if err != nil {
			return err
		}
		s.api.mu.Lock()
		same := v == s.api.version
		s.api.mu.Unlock()
		if same {
			return nil
		}
	}
	s.api.mu.Lock()
	defer s.api.mu.Unlock()
	version, fields, err := s.api.store.load(ctx)
	if err != nil {
		return err
	}
	if version == s.api.version {
		return nil
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	var list []*rules.Rule
	var skipped []string
	recs := make(map[string]apiRecord, len(keys))
	for _, k := range keys {
		var rec apiRecord
		err := json.Unmarshal([]byte(fields[k]), &rec)
		var r *rules.Rule
		if err == nil {
			r, err = rules.Compile(rec.Domain, rec.Path, rec.Spec)
		}
		if err == nil && field(rec.Domain, rec.Path) != k {
			err = errors.New("its field does not match its domain and path")
		}
		if err != nil {
			// Written by another version of redlimit, or by hand: the
			// others still apply.
			s.cfg.Logger.Error("redlimit serve: skipping a rule of the API store", "field", strconv.Quote(k), "err", err)
			skipped = append(skipped, strings.Replace(strconv.Quote(k), `\x00`, "/", 1)+": "+err.Error())
			continue
		}
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(fields[k]), fields[k])
		list = append(list, r)
		recs[k] = rec
	}
	digest := ""
	if len(list) > 0 {
		digest = hex.EncodeToString(h.Sum(nil))
	}
	if s.api.file != nil {
		merged, err := s.api.file.With(list, digest)
		if err != nil {
			return err
		}
		if err := s.dec.SetRules(ctx, merged); err != nil {
			return err
		}
	}
	s.api.list, s.api.recs, s.api.digest, s.api.version = list, recs, digest, version
	s.api.skipped = skipped
	if s.reg != nil {
		s.reg.changed() // the registry shows the new RulesVersion at once
	}
	return nil
}

// followAPI keeps the rules set through the API in force until ctx
// ends: at each announcement of a change on the shared Redis, and every
// RulesPoll in case one was missed.
func (s *Server) followAPI(ctx context.Context) {
	if s.cfg.RedisClient == nil {
		return // the API's writes on this instance put themselves in force
	}
	ps := s.cfg.RedisClient.Subscribe(ctx, s.cfg.Prefix+"rules:changed")
	defer ps.Close()
	msgs := ps.Channel()
	tick := time.NewTicker(s.cfg.RulesPoll)
	defer tick.Stop()
	for {
		// First a check: a change made before the subscription is
		// not announced to it.
		sctx, cancel := context.WithTimeout(ctx, syncTimeout)
		s.reportSync(ctx, s.syncAPI(sctx, false))
		cancel()
		select {
		case <-ctx.Done():
			return
		case _, ok := <-msgs:
			if !ok {
				msgs = nil
			}
		case <-tick.C:
		}
	}
}

// reportSync logs a failure to follow the store once until it changes.
func (s *Server) reportSync(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.api.mu.Lock()
	defer s.api.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == s.api.lastErr {
		return
	}
	s.api.lastErr = msg
	if err != nil {
		s.cfg.Logger.Error("redlimit serve: cannot read the rules set through the API, keeping those in force", "err", err)
	} else {
		s.cfg.Logger.Info("redlimit serve: reading the rules set through the API again")
	}
}

// apiHealth is what /readyz says of the rules set through the API: the
// last failure to read them (the rules in force are kept meanwhile) and
// the records the last read skipped.
func (s *Server) apiHealth() (lastErr string, skipped []string) {
	s.api.mu.Lock()
	defer s.api.mu.Unlock()
	return s.api.lastErr, s.api.skipped
}

// apiRoutes adds the API's routes to mux:
//
//	GET    /v1/rules                    the rules in force and their sources
//	PUT    /v1/rules/{domain}/{path...} sets a rule (bearer token)
//	DELETE /v1/rules/{domain}/{path...} removes it (bearer token)
//	GET    /v1/audit?limit=N            the last changes, newest first
//	GET    /v1/keys/{domain}?descriptor=k1=v1,k2=v2
//	                                    one key's state, nothing charged
func (s *Server) apiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rules", s.handleListRules)
	mux.HandleFunc("PUT /v1/rules/{domain}/{path...}", s.handlePutRule)
	mux.HandleFunc("DELETE /v1/rules/{domain}/{path...}", s.handleDeleteRule)
	mux.HandleFunc("GET /v1/audit", s.handleAudit)
	mux.HandleFunc("GET /v1/keys/{domain}", s.handleKey)
}

// apiRuleView is a rule as GET /v1/rules shows it.
type apiRuleView struct {
	Domain     string         `json:"domain"`
	Path       string         `json:"path"`
	Descriptor []entryView    `json:"descriptor"`
	Name       string         `json:"name,omitempty"`
	Limits     []apiLimitView `json:"limits"`
	Unlimited  bool           `json:"unlimited"`
	Blocked    bool           `json:"blocked,omitempty"`
	ShadowMode bool           `json:"shadow_mode"`
	QuotaMode  bool           `json:"quota_mode,omitempty"`
	Replaces   []string       `json:"replaces,omitempty"`
	// Source is "file" or "api".
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	// SetBy and SetAt: who set an API rule (the token's name), and when.
	SetBy string     `json:"set_by,omitempty"`
	SetAt *time.Time `json:"set_at,omitempty"`
	// Overrides: the file's rule an API rule stands in for.
	Overrides *fileRef `json:"overrides,omitempty"`
}

// entryView is a descriptor's entry as the API shows it.
type entryView struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func entriesView(entries []rules.Entry) []entryView {
	out := make([]entryView, len(entries))
	for i, e := range entries {
		out[i] = entryView{e.Key, e.Value}
	}
	return out
}

type fileRef struct {
	File string `json:"file"`
	Line int    `json:"line"`
}

type apiLimitView struct {
	Name      string `json:"name,omitempty"`
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	Interval  string `json:"interval"`
	Burst     int64  `json:"burst,omitempty"`
	Capacity  int64  `json:"capacity,omitempty"`
	Limit     string `json:"limit"`
}

// view shows r; the caller holds s.api.mu.
func (s *Server) view(r *rules.Rule) apiRuleView {
	v := apiRuleView{Domain: r.Domain, Path: r.Path, Name: r.Name, Limits: []apiLimitView{}, Unlimited: r.Unlimited, Blocked: r.Blocked,
		ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode, Replaces: r.Replaces, Source: "file", File: r.File, Line: r.Line}
	entries, _ := rules.ParsePath(r.Path)
	v.Descriptor = entriesView(entries)
	for _, l := range r.Limits {
		c := l.Config
		v.Limits = append(v.Limits, apiLimitView{Name: l.Name, Algorithm: string(c.Algorithm), Rate: c.Rate, Interval: c.Interval.String(), Burst: c.Burst, Capacity: c.Capacity, Limit: redlimit.LimitName(c)})
	}
	if r.Blocked {
		v.Limits = append(v.Limits, apiLimitView{Algorithm: "blocked", Interval: r.BlockedInterval.String(), Limit: "0/" + r.BlockedInterval.String()})
	}
	if r.API {
		v.Source, v.File, v.Line = "api", "", 0
		if rec, ok := s.api.recs[field(r.Domain, r.Path)]; ok {
			at := rec.At
			v.SetBy, v.SetAt = rec.By, &at
		}
		if s.api.file != nil {
			if d := s.api.file.Domain(r.Domain); d != nil {
				for _, fr := range d.Rules {
					if fr.Path == r.Path {
						v.Overrides = &fileRef{File: fr.File, Line: fr.Line}
						break
					}
				}
			}
		}
	}
	return v
}

// sourceOf says where a rule comes from, for GET /rules.
func sourceOf(r *rules.Rule) string {
	if r.API {
		return "api"
	}
	return "file " + r.File + ":" + strconv.Itoa(r.Line)
}

func (s *Server) handleListRules(w http.ResponseWriter, _ *http.Request) {
	set := s.dec.Rules()
	if set == nil {
		problem(w, http.StatusServiceUnavailable, "no rules loaded")
		return
	}
	s.api.mu.Lock()
	views := []apiRuleView{}
	for _, r := range set.Rules() {
		views = append(views, s.view(r))
	}
	s.api.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"version": set.Digest, "rules": views})
}

// ruleAt returns the rule in force at domain and path, nil when none.
func (s *Server) ruleAt(domain, path string) *rules.Rule {
	if set := s.dec.Rules(); set != nil {
		if d := set.Domain(domain); d != nil {
			for _, r := range d.Rules {
				if r.Path == path {
					return r
				}
			}
		}
	}
	return nil
}

func (s *Server) handlePutRule(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authorize(w, r)
	if !ok {
		return
	}
	domain, path := r.PathValue("domain"), r.PathValue("path")
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var spec rules.Spec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		problemField(w, http.StatusBadRequest, jsonField(err), "the body is not a rule as JSON: "+err.Error())
		return
	}
	if dec.More() {
		problemField(w, http.StatusBadRequest, "", "the body holds more than one JSON value")
		return
	}
	if _, err := rules.Compile(domain, path, spec); err != nil {
		var re *rules.Error
		if errors.As(err, &re) {
			problemField(w, http.StatusBadRequest, re.Field, re.Field+": "+re.Reason)
			return
		}
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	rec := apiRecord{Domain: domain, Path: path, Spec: spec, By: who, At: time.Now().UTC()}
	s.write(w, r, "put", rec, true)
}

func (s *Server) handleDeleteRule(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authorize(w, r)
	if !ok {
		return
	}
	domain, path := r.PathValue("domain"), r.PathValue("path")
	s.write(w, r, "delete", apiRecord{Domain: domain, Path: path, By: who, At: time.Now().UTC()}, false)
}

// auditRecord is one change made through the API.
type auditRecord struct {
	At     time.Time       `json:"at"`
	Token  string          `json:"token"`
	Action string          `json:"action"`
	Domain string          `json:"domain"`
	Path   string          `json:"path"`
	New    json.RawMessage `json:"new"`
	Old    json.RawMessage `json:"old"`
}

// write stores rec (put) or removes its rule, audits and logs the
// change, puts it in force here and answers with the rule now in force.
func (s *Server) write(w http.ResponseWriter, r *http.Request, action string, rec apiRecord, put bool) {
	value := ""
	newJSON := json.RawMessage("null")
	if put {
		b, err := json.Marshal(rec)
		if err != nil {
			problem(w, http.StatusInternalServerError, err.Error())
			return
		}
		value, newJSON = string(b), b
	}
	// The audit record's head: everything up to the old value, which the
	// store fills in as it writes.
	head, err := json.Marshal(auditRecord{At: rec.At, Token: rec.By, Action: action, Domain: rec.Domain, Path: rec.Path, New: newJSON, Old: json.RawMessage("0")})
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	head = bytes.TrimSuffix(head, []byte("0}"))
	old, wrote, err := s.api.store.write(r.Context(), field(rec.Domain, rec.Path), value, string(head))
	if err != nil {
		problem(w, http.StatusServiceUnavailable, "the rules store: "+err.Error())
		return
	}
	if !wrote {
		problem(w, http.StatusNotFound, "no rule set through the API at domain "+strconv.Quote(rec.Domain)+" path "+strconv.Quote(rec.Path))
		return
	}
	s.cfg.Logger.Info("redlimit serve: rule changed through the API", "action", action, "token", rec.By, "domain", rec.Domain, "path", rec.Path)
	// In force here before the answer, even if the caller has gone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), syncTimeout)
	defer cancel()
	if err := s.syncAPI(ctx, true); err != nil {
		problem(w, http.StatusServiceUnavailable, "the change is stored but not yet in force here (it will be at the next check): "+err.Error())
		return
	}
	var oldRec *apiRecord
	if old != "" {
		var o apiRecord
		if json.Unmarshal([]byte(old), &o) == nil {
			oldRec = &o
		}
	}
	s.api.mu.Lock()
	var cur *apiRuleView
	if r := s.ruleAt(rec.Domain, rec.Path); r != nil {
		v := s.view(r)
		cur = &v
	}
	s.api.mu.Unlock()
	version := s.RulesVersion()
	if put && cur != nil {
		// The rule set, as GET /v1/rules shows it, and the version.
		writeJSON(w, http.StatusOK, struct {
			apiRuleView
			Version  string     `json:"version"`
			Previous *apiRecord `json:"previous"`
		}{*cur, version, oldRec})
		return
	}
	// The rule in force now (the file's, or none) and the one removed.
	writeJSON(w, http.StatusOK, map[string]any{"version": version, "rule": cur, "removed": oldRec})
}

// syncTimeout bounds one reading of the rules set through the API.
const syncTimeout = 10 * time.Second

// readBody reads r's body within MaxRequestBytes, or answers 413 or 400.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxRequestBytes)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "the request body is over the limit of "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
			return nil, false
		}
		problem(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return nil, false
	}
	return body, true
}

// jsonField names the member a JSON decoding error is about, when known.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

// problemField writes a problem naming the field at fault (an extension
// member "field", RFC 9457 §3.2).
func problemField(w http.ResponseWriter, code int, field, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	out := map[string]any{"type": "about:blank", "title": http.StatusText(code), "status": code, "detail": detail}
	if field != "" {
		out["field"] = field
	}
	json.NewEncoder(w).Encode(out)
}
