package algorithm_test

import (
	"testing"

	_ "github.com/redlimit/redlimit" // registers the algorithms built in
	"github.com/redlimit/redlimit/algorithm"
)

// FuzzRules drives every registered algorithm's rules with the operations
// the fuzzer picks: no panic, and every answer is well formed.
func FuzzRules(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint16(100), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(3), uint8(1), uint16(1), []byte{255, 0, 128, 7, 7, 7})
	f.Fuzz(func(t *testing.T, which, rate uint8, interval uint16, ops []byte) {
		all := algorithm.All()
		spec := all[int(which)%len(all)]
		s := spec.New()
		lim := algorithm.Limit{Rate: int64(rate%50) + 1, Interval: int64(interval%5000) + 1}
		// Each parameter the algorithm takes a little above the rate,
		// then its defaults.
		if spec.Params&algorithm.Burst != 0 {
			lim.Burst = lim.Rate + int64(rate%7)
		}
		if spec.Params&algorithm.Capacity != 0 {
			lim.Capacity = lim.Rate + int64(rate%5)
		}
		if spec.Defaults != nil {
			lim = spec.Defaults(lim)
		}
		most := spec.Max(lim)
		now := int64(1_700_000_000_000)
		var reserved []algorithm.Decision
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], int64(ops[i+1])
			n := arg%most + 1
			switch op % 6 {
			case 0, 1:
				wait := []int64{0, algorithm.Unlimited, arg * 3}[op%3]
				var notBefore int64 // none, or an instant of the next steps
				if op&8 != 0 {
					notBefore = now + arg*arg - arg
				}
				d := s.AcquireAt(now, lim, n, wait, notBefore)
				if d.Now < now || d.Remaining < 0 || d.Remaining > most || d.Wait < 0 {
					t.Fatalf("AcquireAt: malformed %+v at %d", d, now)
				}
				if d.Granted && (d.At != d.Now+d.Wait || d.At < notBefore || (wait != algorithm.Unlimited && d.Wait > wait)) {
					t.Fatalf("AcquireAt(wait %d, not before %d): grant %+v", wait, notBefore, d)
				}
				if d.Granted && d.Wait > 0 {
					reserved = append(reserved, d)
				}
			case 2:
				if len(reserved) > 0 {
					d := reserved[int(arg)%len(reserved)]
					if got := s.Cancel(now, lim, d.At, n); got < 0 || got > n {
						t.Fatalf("Cancel = %d of %d", got, n)
					}
				}
			case 3:
				if got := s.Release(now, lim, n); got < 0 || got > n {
					t.Fatalf("Release = %d of %d", got, n)
				}
			case 4:
				if got := s.Available(now, lim); got < 0 || got > most {
					t.Fatalf("Available = %d, most %d", got, most)
				}
			default:
				now += arg * arg
			}
		}
	})
}
