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

// scriptKeys lists the KEYS of limiter.lua for client.
func (k keys) scriptKeys(client string) []string {
	return []string{k.limiter, k.log, k.base + "client:" + client, k.base + "log:" + client}
}
