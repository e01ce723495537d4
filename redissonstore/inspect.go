package redissonstore

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// Encoding names how a grant's member is packed (Lua struct formats,
// little-endian as Redis runs on x86-64 and arm64).
type Encoding string

const (
	// EncodingFI is the legacy layout's 'fI': the random long as a 4-byte
	// float, then the permits as a 4-byte unsigned int (8 bytes).
	EncodingFI Encoding = "fI"
	// EncodingLc0I is 'Lc0I', written by some 3.16.x releases between the
	// two layouts: an 8-byte length, the random long as decimal text, the
	// permits. Inspect reads it; no store layout writes it.
	EncodingLc0I Encoding = "Lc0I"
	// EncodingBc0I is the current layout's 'Bc0I': a length byte, that many
	// random bytes (8 in 3.17-3.2x, 16 since), the permits.
	EncodingBc0I Encoding = "Bc0I"
)

func (l Layout) encoding() Encoding {
	if l == Legacy {
		return EncodingFI
	}
	return EncodingBc0I
}

// Member is a decoded member of a Redisson permits log.
type Member struct {
	Encoding Encoding
	// Permits granted.
	Permits int64
	// Random is the random part as stored: the raw bytes (Bc0I), the decimal
	// text (Lc0I) or the float's 4 bytes (fI).
	Random []byte
	// Float is the random part of an fI member as a number.
	Float float32
}

// DecodeMember decodes a member of a permits log. Its length tells the
// encodings apart, except that an 8-byte member whose first byte is 3 fits
// both 'fI' and 'Bc0I' (3 random bytes): the encoding of prefer then wins.
func DecodeMember(b []byte, prefer Layout) (Member, error) {
	var fits []Encoding
	if len(b) == 8 {
		fits = append(fits, EncodingFI)
	}
	if len(b) >= 5 && 1+int(b[0])+4 == len(b) {
		fits = append(fits, EncodingBc0I)
	}
	if len(b) >= 12 {
		if l := binary.LittleEndian.Uint64(b[:8]); l <= uint64(len(b)) && 8+int(l)+4 == len(b) {
			fits = append(fits, EncodingLc0I)
		}
	}
	if len(fits) == 0 {
		return Member{}, fmt.Errorf("%w: %d-byte member %s fits no Redisson encoding", redlimit.ErrCorrupt, len(b), hex.EncodeToString(b))
	}
	enc := fits[0]
	for _, e := range fits {
		if e == prefer.encoding() {
			enc = e
		}
	}
	m := Member{Encoding: enc, Permits: int64(binary.LittleEndian.Uint32(b[len(b)-4:]))}
	switch enc {
	case EncodingFI:
		m.Random = append([]byte(nil), b[:4]...)
		m.Float = math.Float32frombits(binary.LittleEndian.Uint32(b[:4]))
	case EncodingBc0I:
		m.Random = append([]byte(nil), b[1:len(b)-4]...)
	case EncodingLc0I:
		m.Random = append([]byte(nil), b[8:len(b)-4]...)
	}
	return m, nil
}

// String shows the member as "3 permits, Bc0I random 0a1b...".
func (m Member) String() string {
	permits := fmt.Sprintf("%d permits", m.Permits)
	if m.Permits == 1 {
		permits = "1 permit"
	}
	switch m.Encoding {
	case EncodingFI:
		return fmt.Sprintf("%s, fI random %g", permits, m.Float)
	case EncodingLc0I:
		return fmt.Sprintf("%s, Lc0I random %s", permits, m.Random)
	}
	return fmt.Sprintf("%s, %s random %s", permits, m.Encoding, hex.EncodeToString(m.Random))
}

// Grant is one entry of a permits log.
type Grant struct {
	Member
	// At is the grant time (the score), by the granting client's clock.
	At time.Time
	// Expired: At <= Now - interval; the next call hands its permits back.
	Expired bool
	// Raw is the member as stored; Err is set when it could not be decoded.
	Raw []byte
	Err error
}

// State is the counter and the log of one Overall or PER_CLIENT limit.
type State struct {
	// Client is the PER_CLIENT id, "" for the Overall state.
	Client               string
	ValueKey, PermitsKey string
	// Value is the counter as stored (HasValue false: no counter).
	Value    int64
	HasValue bool
	// Left is what the store would answer Available with now: the counter
	// with the expired grants' permits back (no counter: rate minus the
	// permits in use).
	Left int64
	// InUse is the sum of the permits of the grants still in the window.
	InUse int64
	// Grants, oldest first.
	Grants []Grant
	// TTL of the counter and the log (-1: none, -2: no key), as PTTL.
	ValueTTL, PermitsTTL time.Duration
}

// Inspection is a readable snapshot of a Redisson rate limiter, taken in one
// MULTI/EXEC.
type Inspection struct {
	Name   string
	Keys   Keys
	Layout Layout
	// Now is the store clock's time the snapshot is judged at.
	Now time.Time
	// Initialized: the hash holds rate, interval and type.
	Initialized bool
	// Config is the hash as a redlimit config; ConfigErr says why not.
	Config    redlimit.Config
	ConfigErr error
	// Raw fields of the hash ("" when missing).
	Rate, Interval, Type, KeepAliveTime string
	KeepAlive                           time.Duration
	// ConfigTTL of the hash, as PTTL (-1: none, -2: no key).
	ConfigTTL time.Duration
	// States: the Overall one first, then the PER_CLIENT ones asked for
	// (or, from InspectAll, found).
	States []State
	// ClientsScanned: the PER_CLIENT states are every client's that has
	// state (InspectAll), not only those asked for.
	ClientsScanned bool
}

// PerClient reports whether the config read is PER_CLIENT: each client has
// its own state, and the Overall one is not used.
func (in *Inspection) PerClient() bool {
	return in.Initialized && in.ConfigErr == nil && in.Config.Mode == redlimit.PerClient
}

// Found reports whether any key of the limiter exists: its hash, or a
// counter or log of a state read.
func (in *Inspection) Found() bool {
	if in.ConfigTTL != -2 {
		return true
	}
	for _, st := range in.States {
		if st.ValueTTL != -2 || st.PermitsTTL != -2 {
			return true
		}
	}
	return false
}

// InspectAll is Inspect with the states of every client found: for a
// PER_CLIENT limiter, after the Overall state, the state of each client id
// ClientIDs finds (a SCAN: for tools, not for the request path). The
// clients are found before the snapshot is taken: one that acquires for
// the first time in between is missed.
func (s *Store) InspectAll(ctx context.Context, name string) (*Inspection, error) {
	in, err := s.Inspect(ctx, name)
	if err != nil || !in.PerClient() {
		return in, err
	}
	ids, err := s.ClientIDs(ctx, name)
	if err != nil {
		return nil, err
	}
	// Taken again with the clients, so that config and states are one
	// snapshot.
	if in, err = s.Inspect(ctx, name, ids...); err != nil {
		return nil, err
	}
	in.ClientsScanned = true
	return in, nil
}

// Inspect reads the limiter called name: its config, and the counter and
// decoded grant log of the Overall state and of each PER_CLIENT client in
// clients (none given: the store's WithClientID client, if any). Members of
// every known encoding are decoded; an unreadable one is reported in its
// Grant, not as an error. Inspect writes nothing.
func (s *Store) Inspect(ctx context.Context, name string, clients ...string) (*Inspection, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return nil, err
	}
	if len(clients) == 0 && s.clientID != "" {
		clients = []string{s.clientID}
	}
	for _, c := range clients {
		if err := (redlimit.Key{Client: c}).ValidateClient(); err != nil {
			return nil, err
		}
	}
	k := KeysOf(name)
	type stateCmds struct {
		value          *redis.StringCmd
		log            *redis.ZSliceCmd
		vttl, pttl     *redis.DurationCmd
		client, vk, pk string
	}
	var (
		hash   *redis.SliceCmd
		ttl    *redis.DurationCmd
		states []stateCmds
	)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hash = p.HMGet(ctx, k.Config, hashFields...)
		ttl = p.PTTL(ctx, k.Config)
		add := func(client, vk, pk string) {
			states = append(states, stateCmds{value: p.Get(ctx, vk), log: p.ZRangeWithScores(ctx, pk, 0, -1),
				vttl: p.PTTL(ctx, vk), pttl: p.PTTL(ctx, pk), client: client, vk: vk, pk: pk})
		}
		add("", k.Value, k.Permits)
		for _, c := range clients {
			add(c, k.ClientValue(c), k.ClientPermits(c))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, wrap(err)
	}
	for _, c := range []redis.Cmder{hash, ttl} {
		if err := c.Err(); err != nil {
			return nil, wrap(err)
		}
	}
	for _, sc := range states {
		for _, c := range []redis.Cmder{sc.value, sc.log, sc.vttl, sc.pttl} {
			if err := c.Err(); err != nil && err != redis.Nil {
				return nil, wrap(err)
			}
		}
	}
	in := &Inspection{Name: name, Keys: k, Layout: s.layout, Now: s.clock.Now(), ConfigTTL: ttl.Val()}
	fields := hash.Val()
	raw := make([]string, 4)
	for i, f := range fields {
		if str, ok := f.(string); ok {
			raw[i] = str
		}
	}
	in.Rate, in.Interval, in.Type, in.KeepAliveTime = raw[0], raw[1], raw[2], raw[3]
	in.Initialized = raw[0] != "" && raw[1] != "" && raw[2] != ""
	in.Config, in.KeepAlive, in.ConfigErr = decodeConfig(name, fields)
	rate, _ := strconv.ParseInt(in.Rate, 10, 64)
	interval, _ := strconv.ParseInt(in.Interval, 10, 64)
	cut := in.Now.UnixMilli() - interval
	for _, sc := range states {
		st := State{Client: sc.client, ValueKey: sc.vk, PermitsKey: sc.pk, ValueTTL: sc.vttl.Val(), PermitsTTL: sc.pttl.Val()}
		if v, err := sc.value.Result(); err == nil {
			st.Value, _ = strconv.ParseInt(v, 10, 64)
			st.HasValue = true
		}
		var released int64
		for _, z := range sc.log.Val() {
			member, _ := z.Member.(string)
			g := Grant{Raw: []byte(member), At: time.UnixMilli(int64(z.Score))}
			g.Member, g.Err = DecodeMember(g.Raw, s.layout)
			g.Expired = int64(z.Score) <= cut
			if g.Expired {
				released += g.Permits
			} else {
				st.InUse += g.Permits
			}
			st.Grants = append(st.Grants, g)
		}
		switch {
		case !st.HasValue:
			st.Left = rate - st.InUse
		case s.layout == Current && st.Value+released > rate:
			st.Left = rate - st.InUse
		default:
			st.Left = st.Value + released
		}
		st.Left = max(st.Left, 0)
		in.States = append(in.States, st)
	}
	return in, nil
}

// ClientIDs finds the PER_CLIENT client ids that have state under name, by
// scanning for Redisson's {name}:value:<id> and {name}:permits:<id> keys (on
// every primary of a Cluster). It is O(keys in the database): for tools, not
// for the request path.
func (s *Store) ClientIDs(ctx context.Context, name string) ([]string, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return nil, err
	}
	k := KeysOf(name)
	// On a Cluster the primaries are scanned at once; midway through a
	// resharding the limiter's keys are on two of them.
	var mu sync.Mutex
	found := map[string]bool{}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		for _, base := range []string{k.Value, k.Permits} {
			iter := c.Scan(ctx, 0, globEscape(base)+":*", 1000).Iterator()
			for iter.Next(ctx) {
				mu.Lock()
				found[strings.TrimPrefix(iter.Val(), base+":")] = true
				mu.Unlock()
			}
			if err := iter.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return nil, wrap(err)
	}
	ids := make([]string, 0, len(found))
	for id := range found {
		if (redlimit.Key{Client: id}).ValidateClient() == nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// globEscape escapes the glob characters of a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*?[]^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// String renders the inspection for people, one grant a line.
func (in *Inspection) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Redisson rate limiter %q (%s layout) at %s\n", in.Name, in.Layout, in.Now.UTC().Format(time.RFC3339Nano))
	if in.ConfigErr != nil {
		fmt.Fprintf(&b, "  config: %v\n", in.ConfigErr)
	} else {
		fmt.Fprintf(&b, "  config: %s\n", in.Config)
	}
	fmt.Fprintf(&b, "  hash %q: rate=%q interval=%q type=%q keepAliveTime=%q ttl=%s\n", in.Keys.Config, in.Rate, in.Interval, in.Type, in.KeepAliveTime, ttlString(in.ConfigTTL))
	for _, st := range in.States {
		who := "overall"
		switch {
		case st.Client != "":
			who = "client " + st.Client
		case in.PerClient():
			who = "overall (not used: the limiter is PER_CLIENT)"
		}
		value := "none"
		if st.HasValue {
			value = strconv.FormatInt(st.Value, 10)
		}
		fmt.Fprintf(&b, "  %s: %d left, %d in use, counter %s (%q ttl %s), %d grants (%q ttl %s)\n",
			who, st.Left, st.InUse, value, st.ValueKey, ttlString(st.ValueTTL), len(st.Grants), st.PermitsKey, ttlString(st.PermitsTTL))
		for _, g := range st.Grants {
			state := "in use"
			if g.Expired {
				state = "expired"
			}
			if g.Err != nil {
				fmt.Fprintf(&b, "    %s  unreadable member %s\n", g.At.UTC().Format(time.RFC3339Nano), hex.EncodeToString(g.Raw))
				continue
			}
			fmt.Fprintf(&b, "    %s  %s (%s)\n", g.At.UTC().Format(time.RFC3339Nano), g.Member, state)
		}
	}
	if in.PerClient() && len(in.States) <= 1 {
		if in.ClientsScanned {
			b.WriteString("  no client has state: a client's appears with its first acquire\n")
		} else {
			b.WriteString("  PER_CLIENT: no client asked for; name client ids to see their states\n")
		}
	}
	return b.String()
}

func ttlString(d time.Duration) string {
	switch {
	case d == -1:
		return "none"
	case d == -2 || d < 0:
		return "no key"
	}
	return d.String()
}
