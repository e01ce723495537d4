package redisstore

import (
	"strings"
)

// DefaultPrefix starts every key redlimit writes.
const DefaultPrefix = "redlimit:"

// keys names a limiter's keys. They all carry the same Redis Cluster hash tag,
// the escaped name in braces, so one script can touch them all; escaping the
// braces (and the escape character) keeps a name from choosing another tag and
// keeps distinct names on distinct keys.
//
// PREFIX{name} is the limiter hash: its config and its Overall state, one
// small key (token bucket: ~150 bytes in Redis). PREFIX{name}:log is the
// Overall sliding-log list; PREFIX{name}:client:CLIENT and
// PREFIX{name}:log:CLIENT are a PerClient client's state and list.
type keys struct {
	limiter, log, base string
}

var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func limiterKeys(prefix, name string) keys {
	limiter := prefix + "{" + nameEscaper.Replace(name) + "}"
	return keys{limiter: limiter, log: limiter + ":log", base: limiter + ":"}
}

// scriptKeys lists the KEYS of the Lua library for name and client: the keys
// of limiterKeys(prefix, name), the client's after the Overall ones, cut
// from one string, as every lone call on an idle limiter makes them anew.
func scriptKeys(prefix, name, client string) []string {
	ks := make([]string, 4)
	scriptKeysInto((*[4]string)(ks), prefix, name, client)
	return ks
}

// scriptKeysInto is scriptKeys writing into ks.
func scriptKeysInto(ks *[4]string, prefix, name, client string) {
	tag := nameEscaper.Replace(name)
	var b strings.Builder
	b.Grow(4*(len(prefix)+len(tag)+2) + len(":log:client::log:") + 2*len(client))
	var ends [4]int
	for i, suffix := range [...]string{"", ":log", ":client:", ":log:"} {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(tag)
		b.WriteByte('}')
		b.WriteString(suffix)
		if i >= 2 {
			b.WriteString(client)
		}
		ends[i] = b.Len()
	}
	all, start := b.String(), 0
	for i, end := range ends {
		ks[i], start = all[start:end], end
	}
}
