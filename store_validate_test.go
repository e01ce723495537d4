package redlimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
)

// TestStoreValidation: the checks a Store makes before anything else
// return the typed errors a Limiter returns for the same input.
func TestStoreValidation(t *testing.T) {
	tb := redlimit.TokenBucketConfig(10, time.Second, 4)
	cases := []struct {
		name string
		err  error
		want error // nil: valid
	}{
		{"key", redlimit.Key{Name: "n", Client: "c"}.Validate(), nil},
		{"key without name", redlimit.Key{Client: "c"}.Validate(), redlimit.ErrInvalidArgument},
		{"key without client", redlimit.Key{Name: "n"}.Validate(), redlimit.ErrInvalidArgument},
		{"client with a control character", redlimit.Key{Name: "n", Client: "a\nb"}.Validate(), redlimit.ErrInvalidArgument},
		{"name of 1024 bytes", redlimit.Key{Name: strings.Repeat("n", 1024)}.ValidateName(), nil},
		{"name of 1025 bytes", redlimit.Key{Name: strings.Repeat("n", 1025)}.ValidateName(), redlimit.ErrInvalidArgument},
		{"client of 257 bytes", redlimit.Key{Client: strings.Repeat("c", 257)}.ValidateClient(), redlimit.ErrInvalidArgument},
		{"ttl 1ms", redlimit.Key{Name: "n"}.ValidateTTL(time.Millisecond), nil},
		{"ttl below 1ms", redlimit.Key{Name: "n"}.ValidateTTL(time.Microsecond), redlimit.ErrInvalidArgument},
		{"ttl without name", redlimit.Key{}.ValidateTTL(time.Second), redlimit.ErrInvalidArgument},
		{"set mode", redlimit.SetResetState.Validate(), nil},
		{"unknown set mode", redlimit.SetMode(7).Validate(), redlimit.ErrInvalidArgument},
		{"permits up to the burst", tb.ValidatePermits(4), nil},
		{"permits over the burst", tb.ValidatePermits(5), redlimit.ErrPermitsExceedRate},
		{"zero permits", tb.ValidatePermits(0), redlimit.ErrInvalidArgument},
		{"unknown config: up to 2^40", redlimit.Config{}.ValidatePermits(1 << 40), nil},
		{"unknown config: over 2^40", redlimit.Config{}.ValidatePermits(1<<40 + 1), redlimit.ErrPermitsExceedRate},
	}
	for _, c := range cases {
		if c.want == nil && c.err != nil {
			t.Errorf("%s: %v; want valid", c.name, c.err)
		}
		if c.want != nil && !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, c.err, c.want)
		}
		var ae *redlimit.ArgumentError
		if c.want != nil && !errors.As(c.err, &ae) {
			t.Errorf("%s: %T is not an *ArgumentError", c.name, c.err)
		}
	}
	// ErrPermitsExceedRate is also an invalid argument.
	if err := tb.ValidatePermits(5); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("permits over the burst: %v is not ErrInvalidArgument", err)
	}
}

// TestWithNewEpoch: a fresh epoch is positive, below 2^52 (exact in every
// store) and changes nothing else.
func TestWithNewEpoch(t *testing.T) {
	cfg := redlimit.PerSecond(5)
	seen := map[int64]bool{}
	for range 100 {
		n := cfg.WithNewEpoch()
		if n.Epoch <= 0 || n.Epoch >= 1<<52 {
			t.Fatalf("epoch %d out of (0, 2^52)", n.Epoch)
		}
		seen[n.Epoch] = true
		n.Epoch = cfg.Epoch
		if n != cfg {
			t.Fatalf("WithNewEpoch changed more than the epoch: %+v", n)
		}
	}
	if len(seen) < 90 {
		t.Fatalf("100 epochs, %d distinct", len(seen))
	}
}
