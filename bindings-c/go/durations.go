package llmgov

import (
	"math"
	"time"
)

// The library counts time in unsigned 64-bit milliseconds and nanoseconds,
// time.Duration in signed nanoseconds: these convert every such count,
// and a count longer than a Duration holds (about 292 years; a date far
// ahead, or u64::MAX for "never") is the longest Duration, not one
// wrapped negative.

// millis is ms milliseconds as a Duration, saturating at math.MaxInt64.
func millis[N ~uint64](ms N) time.Duration {
	if uint64(ms) > math.MaxInt64/uint64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// nanos is ns nanoseconds as a Duration, saturating at math.MaxInt64.
func nanos[N ~uint64](ns N) time.Duration {
	if uint64(ns) > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}
