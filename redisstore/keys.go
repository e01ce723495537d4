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
type keys struct {
	config, state, log string
}

var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func limiterKeys(prefix, name string) keys {
	base := prefix + "{" + nameEscaper.Replace(name) + "}:"
	return keys{config: base + "config", state: base + "state", log: base + "log"}
}

// scriptKeys lists the KEYS of limiter.lua for client.
func (k keys) scriptKeys(client string) []string {
	return []string{k.config, k.state, k.log, k.state + ":" + client, k.log + ":" + client}
}
