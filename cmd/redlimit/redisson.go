package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redlimit/redlimit/redissonstore"
	"github.com/redlimit/redlimit/redisstore"
)

// redissonFlags select a Redisson limiter: the layout of the Redisson the
// Java side runs, and its PER_CLIENT clients to show or carry.
type redissonFlags struct {
	layout  string
	clients clientList
}

type clientList []string

func (l *clientList) String() string     { return fmt.Sprint(*l) }
func (l *clientList) Set(v string) error { *l = append(*l, v); return nil }

// openRedisson opens the Redis of sf as Redisson sees it, with no key prefix
// (Redisson uses none), and the native store on the same client.
func (c *cli) openRedisson(sf *storeFlags, rf *redissonFlags) (*redissonstore.Store, *redisstore.Store, func(), error) {
	if sf.redisURL == "" {
		return nil, nil, nil, errors.New("a Redisson limiter lives in Redis: give --redis URL (or $REDIS_URL)")
	}
	layout, err := redissonstore.ParseLayout(rf.layout)
	if err != nil {
		return nil, nil, nil, err
	}
	rdb, err := c.newRedisClient(sf)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := []redissonstore.Option{redissonstore.WithLayout(layout)}
	if c.deps.Clock != nil {
		opts = append(opts, redissonstore.WithTimeSource(c.deps.Clock))
	}
	rs, err := redissonstore.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	nopts := []redisstore.Option{redisstore.WithPrefix(sf.prefix)}
	if c.deps.Clock != nil {
		nopts = append(nopts, redisstore.WithTimeSource(c.deps.Clock))
	}
	native, err := redisstore.New(rdb, nopts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	return rs, native, func() { _ = rdb.Close() }, nil
}

// getRedisson is "redlimit get NAME --redisson": a Redisson limiter's
// config, permits left and grant log, decoded.
func getRedisson(ctx context.Context, c *cli, cmd *command, sf *storeFlags, rf *redissonFlags, name string) int {
	rs, _, closeStore, err := c.openRedisson(sf, rf)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
	// Without --client, a PER_CLIENT limiter shows every client found.
	var in *redissonstore.Inspection
	if len(rf.clients) > 0 {
		in, err = rs.Inspect(ctx, name, rf.clients...)
	} else {
		in, err = rs.InspectAll(ctx, name)
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	if !in.Found() {
		return c.errorf(cmd, "no Redisson rate limiter %q in this Redis: no key %q (nor its state); "+
			"Redisson keys have no prefix, and --layout %s was read", name, in.Keys.Config, in.Layout)
	}
	if sf.json {
		if code := c.printJSON(cmd, inspectionToJSON(in)); code != exitOK {
			return code
		}
	} else {
		fmt.Fprint(c.stdout, in.String())
	}
	// Keys without a config: shown, but not a limiter one can use.
	if !in.Initialized {
		return c.errorf(cmd, "Redisson rate limiter %q is not initialized: its hash %q lacks rate, interval or type "+
			"(trySetRate was never called, or the hash expired)", name, in.Keys.Config)
	}
	return exitOK
}

// inspectionJSON is "get --redisson --json": an Inspection in the command's
// JSON style (snake_case, times and TTLs in ms, errors as text).
type inspectionJSON struct {
	Name string `json:"name"`
	// ClientsScanned: the client states are every client's found.
	ClientsScanned bool        `json:"clients_scanned"`
	Layout         string      `json:"layout"`
	NowMS          int64       `json:"now_ms"`
	Initialized    bool        `json:"initialized"`
	Config         *configJSON `json:"config,omitempty"`
	ConfigError    string      `json:"config_error,omitempty"`
	ConfigKey      string      `json:"config_key"`
	// The hash's raw fields ("" when missing) and its TTL (-1: none, -2: no key).
	Rate          string              `json:"rate"`
	Interval      string              `json:"interval"`
	Type          string              `json:"type"`
	KeepAliveTime string              `json:"keep_alive_time"`
	ConfigTTLMS   int64               `json:"config_ttl_ms"`
	States        []redissonStateJSON `json:"states"`
}

type redissonStateJSON struct {
	Client       string              `json:"client,omitempty"`
	ValueKey     string              `json:"value_key"`
	PermitsKey   string              `json:"permits_key"`
	Value        *int64              `json:"value,omitempty"` // absent: no counter
	Left         int64               `json:"left"`
	InUse        int64               `json:"in_use"`
	ValueTTLMS   int64               `json:"value_ttl_ms"`
	PermitsTTLMS int64               `json:"permits_ttl_ms"`
	Grants       []redissonGrantJSON `json:"grants"`
}

type redissonGrantJSON struct {
	AtMS     int64  `json:"at_ms"`
	Permits  int64  `json:"permits"`
	Encoding string `json:"encoding,omitempty"`
	Expired  bool   `json:"expired"`
	Error    string `json:"error,omitempty"`
}

func inspectionToJSON(in *redissonstore.Inspection) inspectionJSON {
	out := inspectionJSON{Name: in.Name, ClientsScanned: in.ClientsScanned, Layout: in.Layout.String(), NowMS: in.Now.UnixMilli(), Initialized: in.Initialized,
		ConfigKey: in.Keys.Config, Rate: in.Rate, Interval: in.Interval, Type: in.Type, KeepAliveTime: in.KeepAliveTime,
		ConfigTTLMS: in.ConfigTTL.Milliseconds(), States: []redissonStateJSON{}}
	if in.ConfigErr != nil {
		out.ConfigError = in.ConfigErr.Error()
	} else if in.Initialized {
		cfg := toJSON(in.Config)
		out.Config = &cfg
	}
	for _, st := range in.States {
		sj := redissonStateJSON{Client: st.Client, ValueKey: st.ValueKey, PermitsKey: st.PermitsKey, Left: st.Left, InUse: st.InUse,
			ValueTTLMS: st.ValueTTL.Milliseconds(), PermitsTTLMS: st.PermitsTTL.Milliseconds(), Grants: []redissonGrantJSON{}}
		if st.HasValue {
			v := st.Value
			sj.Value = &v
		}
		for _, g := range st.Grants {
			gj := redissonGrantJSON{AtMS: g.At.UnixMilli(), Permits: g.Permits, Expired: g.Expired}
			if g.Err != nil {
				gj.Error = g.Err.Error()
			} else {
				gj.Encoding = string(g.Encoding)
			}
			sj.Grants = append(sj.Grants, gj)
		}
		out.States = append(out.States, sj)
	}
	return out
}
