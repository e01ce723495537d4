package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/rules"
)

// keyView is one key's state as GET /v1/keys shows it.
type keyView struct {
	Domain     string      `json:"domain"`
	Descriptor []entryView `json:"descriptor"`
	// Rule is the rule the descriptor matches, null when none does.
	Rule *apiRuleView `json:"rule"`
	// Allowed: a request of one hit would be granted now.
	Allowed      bool           `json:"allowed"`
	Remaining    *int64         `json:"remaining,omitempty"`
	ResetMS      int64          `json:"reset_ms"`
	RetryAfterMS int64          `json:"retry_after_ms,omitempty"`
	Limits       []keyLimitView `json:"limits"`
	// Summary says the state in words.
	Summary string `json:"summary"`
}

type keyLimitView struct {
	// Name is the limit's name in the rule, else its LimitName.
	Name         string `json:"name"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// limitViewOf shows l, a limit of rule, by the name the rule gives it
// (else its LimitName).
func limitViewOf(rule *rules.Rule, l *redlimit.LimitStatus) keyLimitView {
	name := l.Name
	for _, rl := range rulesLimits(rule) {
		if rl.Config == l.Config && rl.Name != "" {
			name = rl.Name
			break
		}
	}
	return keyLimitView{Name: name, Limit: l.Config.MaxPermits(), Remaining: l.Remaining, ResetMS: l.ResetAfter.Milliseconds(), RetryAfterMS: l.RetryAfter.Milliseconds()}
}

func rulesLimits(rule *rules.Rule) []rules.Limit {
	if rule == nil {
		return nil
	}
	return rule.Limits
}

// parseDescriptor reads the raw (still URL-escaped) query value
// "k1=v1,k2=v2": a key alone has an empty value; a ',' or '=' within a
// key or value is sent escaped (%2C, %3D).
func parseDescriptor(raw string) ([]rules.Entry, error) {
	if raw == "" {
		return nil, errors.New("missing: give descriptor=key=value,key2=value2")
	}
	var out []rules.Entry
	for i, part := range strings.Split(raw, ",") {
		rk, rv, _ := strings.Cut(part, "=")
		k, err1 := url.QueryUnescape(rk)
		v, err2 := url.QueryUnescape(rv)
		switch {
		case err1 != nil || err2 != nil:
			return nil, fmt.Errorf("entry %d: a bad %%XX escape", i)
		case k == "":
			return nil, fmt.Errorf("entry %d has an empty key", i)
		}
		out = append(out, rules.Entry{Key: k, Value: v})
	}
	return out, nil
}

// rawQuery returns the first value of name in a raw query, unescaped
// only as far as the name.
func rawQuery(query, name string) string {
	for _, kv := range strings.Split(query, "&") {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

// handleKey answers GET /v1/keys/{domain}?descriptor=k1=v1,k2=v2: the
// state of the key that descriptor has under its rule, charging nothing.
func (s *Server) handleKey(w http.ResponseWriter, r *http.Request) {
	domain := r.PathValue("domain")
	entries, err := parseDescriptor(rawQuery(r.URL.RawQuery, "descriptor"))
	if err != nil {
		problemField(w, http.StatusBadRequest, "descriptor", "descriptor: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	rule, res, err := s.dec.Inspect(ctx, domain, entries)
	if err != nil {
		decisionProblem(w, err)
		return
	}
	out := keyView{Domain: domain, Descriptor: entriesView(entries), Allowed: true, Limits: []keyLimitView{}}
	desc := describe(entries)
	switch {
	case rule == nil:
		out.Summary = fmt.Sprintf("No rule of domain %q matches %s: its requests are not limited.", domain, desc)
		writeJSON(w, http.StatusOK, out)
		return
	case rule.Unlimited:
		out.Summary = fmt.Sprintf("%s matches rule %s, which is unlimited: every request is granted.", desc, rule.Path)
	case rule.Blocked:
		out.Allowed = false
		out.Summary = fmt.Sprintf("%s matches rule %s, which refuses every request.", desc, rule.Path)
	default:
		out.Allowed = res.Allowed
		rem := res.Remaining
		out.Remaining = &rem
		out.ResetMS, out.RetryAfterMS = res.ResetAfter.Milliseconds(), res.RetryAfter.Milliseconds()
		var parts []string
		for _, l := range res.Limits {
			lv := limitViewOf(rule, &l)
			words := lv.Name
			if lv.Name != l.Name {
				words = lv.Name + " (" + l.Name + ")"
			}
			out.Limits = append(out.Limits, lv)
			p := fmt.Sprintf("%d of %d left under %s", l.Remaining, l.Config.MaxPermits(), words)
			if l.ResetAfter > 0 {
				p += ", whole again in " + l.ResetAfter.Round(time.Millisecond).String()
			}
			parts = append(parts, p)
		}
		verdict := "a request now would be granted"
		if !res.Allowed {
			verdict = "a request now would be refused"
			if res.RetryAfter > 0 {
				verdict += ", granted again in " + res.RetryAfter.Round(time.Millisecond).String()
			}
		}
		out.Summary = fmt.Sprintf("%s (rule %s): %s; %s.", desc, rule.Path, strings.Join(parts, "; "), verdict)
		if rule.ShadowMode && !res.Allowed {
			out.Summary += " The rule is in shadow mode: it would be answered OK all the same."
		}
	}
	s.api.mu.Lock()
	v := s.view(rule)
	s.api.mu.Unlock()
	out.Rule = &v
	writeJSON(w, http.StatusOK, out)
}

func describe(entries []rules.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return "Key " + strings.Join(parts, ",")
}
