package ratelimitheader

import (
	"net/http"
	"testing"
	"time"
)

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Second:             0,
		0:                        0,
		time.Nanosecond:          1,
		time.Second:              1,
		time.Second + 1:          2,
		59*time.Second + 999e6:   60,
		time.Duration(1<<63 - 1): 9223372037,
	} {
		if got := Seconds(d); got != want {
			t.Errorf("Seconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestFields(t *testing.T) {
	qs := []Quota{
		{Name: "api:10/1s", Quota: 10, Window: 500 * time.Millisecond, Remaining: 3, Reset: 1500 * time.Millisecond},
		{Name: `odd "name"\é`, Quota: 1000, Window: time.Hour, Remaining: -1, Reset: 0, PartitionKey: []byte{0xfb, 0xff}},
	}
	if got, want := PolicyValue(qs), `"api:10/1s";q=10;w=1, "odd \"name\"\\??";q=1000;w=3600;pk=:+/8=:`; got != want {
		t.Errorf("PolicyValue = %s\nwant %s", got, want)
	}
	if got, want := RateLimitValue(qs), `"api:10/1s";r=3;t=2, "odd \"name\"\\??";r=0;t=0;pk=:+/8=:`; got != want {
		t.Errorf("RateLimitValue = %s\nwant %s", got, want)
	}
	h := http.Header{}
	SetLegacy(h, qs)
	if h.Get(LegacyLimit) != "1000" || h.Get(LegacyRemaining) != "0" || h.Get(LegacyReset) != "0" {
		t.Errorf("legacy fields: %v", h)
	}
	SetRetryAfter(h, 0)
	if h.Get(RetryAfterField) != "1" {
		t.Errorf("Retry-After for 0 = %q, want 1", h.Get(RetryAfterField))
	}
	SetRetryAfter(h, 2*time.Second+1)
	if h.Get(RetryAfterField) != "3" {
		t.Errorf("Retry-After for 2s+1ns = %q, want 3", h.Get(RetryAfterField))
	}
	empty := http.Header{}
	Set(empty, nil)
	SetLegacy(empty, nil)
	if len(empty) != 0 {
		t.Errorf("fields for no quota: %v", empty)
	}
}
