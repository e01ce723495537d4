package main

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// nf is a float64 that is written as null in JSON when NaN (a figure a
// round did not have) and read back as NaN.
type nf float64

func (x nf) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(x), 'g', -1, 64), nil
}

func (x *nf) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*x = nf(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*x = nf(f)
	return nil
}

// nfs converts xs for the JSON.
func nfs(xs []float64) []nf {
	out := make([]nf, len(xs))
	for i, x := range xs {
		out[i] = nf(x)
	}
	return out
}

// stat summarises one figure over a cell's rounds: the median and the
// range. With an even number of rounds the median is the mean of the two
// middle values. N counts the rounds that had the figure; 0 leaves the
// others NaN (written as null in the JSON).
type stat struct {
	Median nf  `json:"median"`
	Min    nf  `json:"min"`
	Max    nf  `json:"max"`
	N      int `json:"n"`
}

// summarise is the stat of xs, NaNs left out.
func summarise(xs []float64) stat {
	v := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(v) == 0 {
		nan := nf(math.NaN())
		return stat{Median: nan, Min: nan, Max: nan}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return stat{Median: nf(m), Min: nf(v[0]), Max: nf(v[len(v)-1]), N: len(v)}
}

// perRoundRatios divides a[r] by b[r] round by round: a round where either
// is missing (NaN) or b is not positive gives NaN. The ratio of two systems
// is taken within a round, never between medians, so that a slow stretch of
// the machine that hits one round hits both sides of its ratio.
func perRoundRatios(a, b []float64) []float64 {
	out := make([]float64, max(len(a), len(b)))
	for r := range out {
		out[r] = math.NaN()
		if r < len(a) && r < len(b) && !math.IsNaN(a[r]) && b[r] > 0 {
			out[r] = a[r] / b[r]
		}
	}
	return out
}

// schedule is the order in which a cell's systems are measured: every
// system once per round, rounds one after another (A B C, then again), each
// round starting one system later than the one before (A B C, B C A, C A B)
// so that no system is always the first after a cell's set-up or always
// follows the same neighbour. It returns indexes into the cell's systems.
func schedule(systems, rounds int) [][]int {
	out := make([][]int, rounds)
	for r := range out {
		out[r] = make([]int, systems)
		for k := range systems {
			out[r][k] = (r + k) % systems
		}
	}
	return out
}
