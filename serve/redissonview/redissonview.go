// Package redissonview finds the Redisson rate limiters on a Redis and
// shows them read-only, as `redlimit get --redisson` does one by name:
// the dashboard's view of limiters that Java services share with redlimit.
package redissonview

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redissonstore"
)

// Bounds of one listing: it is a SCAN, for a dashboard, not a request path.
const (
	// MaxLimiters is the most limiters listed.
	MaxLimiters = 100
	// maxScanned is the most keys looked at, on each primary.
	maxScanned = 200_000
)

// Limiter is a Redisson limiter as listed.
type Limiter struct {
	Name        string `json:"name"`
	Initialized bool   `json:"initialized"`
	// Limit is redlimit.LimitName of its config ("" when unreadable).
	Limit     string `json:"limit,omitempty"`
	Mode      string `json:"mode,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
	Error     string `json:"error,omitempty"`
	// States: the Overall one, then each client found (PER_CLIENT).
	States []State `json:"states"`
	// ConfigTTLMS is the hash's TTL in ms (-1: none).
	ConfigTTLMS int64 `json:"config_ttl_ms"`
}

// State is one Overall or per-client state.
type State struct {
	Client string `json:"client,omitempty"`
	Left   int64  `json:"left"`
	InUse  int64  `json:"in_use"`
	Grants int    `json:"grants"`
}

// List is what GET /v1/redisson answers.
type List struct {
	Limiters []Limiter `json:"limiters"`
	// Truncated: there may be more than were listed.
	Truncated bool   `json:"truncated"`
	Layout    string `json:"layout"`
}

// Find lists the Redisson limiters on rdb (hashes holding rate, interval
// and type), each read with redissonstore's InspectAll, sorted by name.
func Find(ctx context.Context, rdb redis.UniversalClient, layout redissonstore.Layout) (List, error) {
	rs, err := redissonstore.New(rdb, redissonstore.WithLayout(layout), redissonstore.AllowRetries())
	if err != nil {
		return List{}, err
	}
	names, truncated, err := candidates(ctx, rdb)
	if err != nil {
		return List{}, err
	}
	out := List{Limiters: []Limiter{}, Truncated: truncated, Layout: layout.String()}
	for _, name := range names {
		in, err := rs.InspectAll(ctx, name)
		if err != nil {
			if errors.Is(err, redlimit.ErrInvalidArgument) {
				continue // a name redlimit cannot address
			}
			return List{}, err
		}
		if !in.Found() {
			continue // gone meanwhile
		}
		l := Limiter{Name: name, Initialized: in.Initialized, ConfigTTLMS: in.ConfigTTL.Milliseconds(), States: []State{}}
		if in.ConfigErr != nil {
			l.Error = in.ConfigErr.Error()
		} else if in.Initialized {
			l.Limit = redlimit.LimitName(in.Config)
			l.Mode = in.Config.Mode.String()
			l.Algorithm = string(in.Config.Algorithm)
		}
		for _, st := range in.States {
			l.States = append(l.States, State{Client: st.Client, Left: st.Left, InUse: st.InUse, Grants: len(st.Grants)})
		}
		out.Limiters = append(out.Limiters, l)
	}
	return out, nil
}

// candidates scans every primary for hashes with Redisson's config fields.
func candidates(ctx context.Context, rdb redis.UniversalClient) ([]string, bool, error) {
	var (
		mu        sync.Mutex
		names     []string
		truncated bool
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		var cursor uint64
		scanned := 0
		for {
			keys, next, err := c.ScanType(ctx, cursor, "*", 1000, "hash").Result()
			if err != nil {
				return err
			}
			scanned += len(keys)
			if len(keys) > 0 {
				pipe := c.Pipeline()
				cmds := make([]*redis.SliceCmd, len(keys))
				for i, k := range keys {
					cmds[i] = pipe.HMGet(ctx, k, "rate", "interval", "type")
				}
				if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
					return err
				}
				mu.Lock()
				for i, cmd := range cmds {
					v := cmd.Val()
					if len(v) == 3 && v[0] != nil && v[1] != nil && v[2] != nil {
						names = append(names, keys[i])
					}
				}
				full := len(names) > MaxLimiters
				mu.Unlock()
				if full {
					return nil
				}
			}
			cursor = next
			if cursor == 0 {
				return nil
			}
			if scanned >= maxScanned {
				mu.Lock()
				truncated = true
				mu.Unlock()
				return nil
			}
		}
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, false, &unavailable{err}
	}
	sort.Strings(names)
	names = slicesCompact(names)
	if len(names) > MaxLimiters {
		names, truncated = names[:MaxLimiters], true
	}
	return names, truncated, nil
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

type unavailable struct{ err error }

func (e *unavailable) Error() string        { return "redisson: scanning Redis: " + e.err.Error() }
func (e *unavailable) Unwrap() error        { return e.err }
func (e *unavailable) Is(target error) bool { return target == redlimit.ErrUnavailable }

// Handler serves GET /v1/redisson (?layout=current|legacy, default
// current) on rdb; with rdb nil it answers an empty list (no Redis, no
// Redisson limiter).
func Handler(rdb redis.UniversalClient) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		layout := redissonstore.Current
		if v := r.URL.Query().Get("layout"); v != "" {
			var err error
			if layout, err = redissonstore.ParseLayout(v); err != nil {
				problem(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		if rdb == nil {
			writeJSON(w, List{Limiters: []Limiter{}, Layout: layout.String()})
			return
		}
		list, err := Find(r.Context(), rdb, layout)
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, redlimit.ErrUnavailable) {
				code = http.StatusServiceUnavailable
			}
			problem(w, code, err.Error())
			return
		}
		writeJSON(w, list)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func problem(w http.ResponseWriter, code int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(code), "status": code, "detail": detail})
}
