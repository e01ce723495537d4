// Package rediserr gives the errors of go-redis their redlimit meaning, for
// both Redis stores (redisstore and redissonstore): one mapping, so that the
// same Redis answer is the same redlimit error whichever store met it.
//
// A refused password or permission is redlimit.ErrDenied; data of the wrong
// type, or a script that failed on what it read, is redlimit.ErrCorrupt;
// everything else (a refused connection, a deadline, LOADING, BUSY,
// READONLY, OOM, ...) is redlimit.ErrUnavailable. The mapped error keeps its
// cause (errors.Is and errors.As reach the go-redis error), and its message
// is Redis's own without the script location Redis appends to errors raised
// inside a script ("script: <sha>, on @user_script:6.").
package rediserr

import (
	"errors"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// Error is a Redis error mapped to its redlimit kind.
type Error struct {
	// Kind is redlimit.ErrDenied, ErrCorrupt or ErrUnavailable.
	Kind error
	// Msg is the cause's message without Redis's script location.
	Msg string
	// Err is the error go-redis returned.
	Err error
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Msg }

// Unwrap makes errors.Is match the kind and errors.As reach the cause.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// kinds are the errors that already carry a redlimit meaning: Wrap leaves
// them alone instead of wrapping them a second time.
var kinds = []error{
	redlimit.ErrUnavailable, redlimit.ErrCorrupt, redlimit.ErrDenied,
	redlimit.ErrInvalidArgument, redlimit.ErrNotInitialized, redlimit.ErrConfigMismatch,
}

// Wrap returns err with its redlimit meaning (nil for nil). An error that
// already has one is returned as it is.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return err
		}
	}
	msg := Clean(err.Error())
	return &Error{Kind: kind(err, msg), Msg: msg, Err: err}
}

// kind classifies err, whose message without the script location is msg.
func kind(err error, msg string) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return redlimit.ErrUnavailable // the connection, a deadline, a closed client
	}
	// go-redis's helpers know the codes; a script that called a denied
	// command reports the code after Redis 6's "Error running script"
	// prefix (which Clean removed from msg), or, since Redis 7, in words.
	if redis.IsAuthError(err) || redis.IsPermissionError(err) || deniedCode(msg) ||
		strings.Contains(msg, "The user executing the script can't") {
		return redlimit.ErrDenied
	}
	if redis.HasErrorPrefix(err, "WRONGTYPE") || strings.HasPrefix(msg, "WRONGTYPE") ||
		strings.HasPrefix(msg, "ERR") && strings.Contains(strings.ToLower(rerr.Error()), "script") {
		return redlimit.ErrCorrupt
	}
	return redlimit.ErrUnavailable
}

func deniedCode(msg string) bool {
	for _, code := range []string{"NOPERM ", "WRONGPASS ", "NOAUTH "} {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
}

var (
	// Redis 7 ends an error raised in a script or function with where:
	// " script: 3f0e...9a, on @user_script:6." (or @user_function).
	scriptSuffix = regexp.MustCompile(`\s*script: [^,\s]+, on @user_(script|function):\d+\.?$`)
	// Redis 6 starts it so: "ERR Error running script (call to f_3f0e...):
	// @user_script:6: ".
	scriptPrefix = regexp.MustCompile(`^ERR Error running script \(call to [^)]*\): @user_(script|function):\d+: `)
	// A Lua error of the script itself names the place in its text:
	// "user_script:12: attempt to ...".
	scriptPlace = regexp.MustCompile(`@?user_(script|function):\d+: `)
)

// Clean returns a Redis error message without the script location Redis
// adds to errors raised inside a script.
func Clean(msg string) string {
	msg = scriptSuffix.ReplaceAllString(msg, "")
	msg = scriptPrefix.ReplaceAllString(msg, "")
	return scriptPlace.ReplaceAllString(msg, "")
}
