package serve

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"unicode"

	"github.com/redlimit/redlimit"
)

// minTokenLen bounds a token from below: a short one is guessed.
const minTokenLen = 16

// maxTokenFile bounds a token file.
const maxTokenFile = 1 << 20

// namedToken is a token as the server keeps it: its name and its
// SHA-256, compared in constant time.
type namedToken struct {
	name string
	sum  [32]byte
}

// tokens gathers cfg.Tokens and the tokens of cfg.TokenFile, checked: a
// name is printable without spaces or ':', a token at least minTokenLen
// bytes without spaces, no name or token twice.
func tokens(cfg *Config) ([]namedToken, error) {
	all := map[string]string{}
	where := map[string]string{}
	for n, t := range cfg.Tokens {
		all[n], where[n] = t, "Config.Tokens"
	}
	if cfg.TokenFile != "" {
		data, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("serve: token file: %w", err)
		}
		if st, err := os.Stat(cfg.TokenFile); err == nil && st.Mode().Perm()&0o077 != 0 && cfg.Logger != nil {
			cfg.Logger.Warn("redlimit serve: the token file is readable by others than its owner", "file", cfg.TokenFile, "mode", st.Mode().Perm().String())
		}
		if len(data) > maxTokenFile {
			return nil, tokenError(cfg.TokenFile, 0, fmt.Sprintf("is over %d bytes", maxTokenFile))
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 4096), maxTokenFile)
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			name, tok, ok := strings.Cut(text, ":")
			name, tok = strings.TrimSpace(name), strings.TrimSpace(tok)
			if !ok || name == "" || tok == "" {
				return nil, tokenError(cfg.TokenFile, line, "want name:token")
			}
			if _, dup := all[name]; dup {
				return nil, tokenError(cfg.TokenFile, line, fmt.Sprintf("the name %q is also given in %s", name, where[name]))
			}
			all[name], where[name] = tok, fmt.Sprintf("%s:%d", cfg.TokenFile, line)
		}
		if err := sc.Err(); err != nil {
			return nil, tokenError(cfg.TokenFile, 0, err.Error())
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[[32]byte]string{}
	out := make([]namedToken, 0, len(names))
	for _, n := range names {
		t := all[n]
		switch {
		case strings.ContainsFunc(n, func(r rune) bool { return r == ':' || !unicode.IsPrint(r) || unicode.IsSpace(r) }):
			return nil, tokenError(where[n], 0, fmt.Sprintf("the name %q holds a ':', a space or an unprintable character", n))
		case len(t) < minTokenLen:
			// The token is never printed, only its name.
			return nil, tokenError(where[n], 0, fmt.Sprintf("the token of %q is %d bytes, at least %d needed", n, len(t), minTokenLen))
		case strings.ContainsFunc(t, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }):
			return nil, tokenError(where[n], 0, fmt.Sprintf("the token of %q holds a space or an unprintable character", n))
		}
		sum := sha256.Sum256([]byte(t))
		if other, dup := seen[sum]; dup {
			return nil, tokenError(where[n], 0, fmt.Sprintf("%q and %q have the same token", other, n))
		}
		seen[sum] = n
		out = append(out, namedToken{name: n, sum: sum})
	}
	return out, nil
}

func tokenError(where string, line int, reason string) error {
	if line > 0 {
		where = fmt.Sprintf("%s:%d", where, line)
	}
	return &redlimit.ArgumentError{Arg: "tokens", Reason: where + ": " + reason, Kind: redlimit.ErrInvalidArgument}
}

// authorize returns the name of the token r carries in its
// Authorization header, or writes the answer refusing it (403 when no
// token is configured, 401 when the token is missing or unknown) and
// returns false. Every configured token is compared, in constant time.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (string, bool) {
	if len(s.api.tokens) == 0 {
		problem(w, http.StatusForbidden, "writes are off: no token is configured (--token-file)")
		return "", false
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="redlimit"`)
		problem(w, http.StatusUnauthorized, "a write needs the header Authorization: Bearer <token>")
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	name, found := "", 0
	for _, t := range s.api.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], t.sum[:])
		if eq == 1 {
			name = t.name
		}
		found |= eq
	}
	if found == 0 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="redlimit", error="invalid_token"`)
		problem(w, http.StatusUnauthorized, "the bearer token is not one of the configured tokens")
		return "", false
	}
	return name, true
}
