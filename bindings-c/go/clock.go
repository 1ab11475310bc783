package llmgov

/*
#include "llmgov.h"
*/
import "C"

import (
	"runtime"
	"sync/atomic"
	"time"
)

// ManualClock is time that moves only when told to, for tests and
// simulations: a governor built WithClock reads it instead of the
// monotonic clock. Safe for concurrent use.
type ManualClock struct {
	handle  *C.llmgov_manual_clock
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// NewManualClock is a manual clock reading start; a negative start reads
// 0, as Set clamps it.
func NewManualClock(start time.Duration) *ManualClock {
	h := C.llmgov_manual_clock_new(C.uint64_t(max(start, 0)))
	c := &ManualClock{handle: h}
	c.cleanup = runtime.AddCleanup(c, func(h *C.llmgov_manual_clock) { C.llmgov_manual_clock_free(h) }, h)
	return c
}

// Advance moves the clock forward by d (negative durations do nothing).
// The clock goes no further than 2^63 ns (about 292 years): a step past
// it is refused with ErrInvalidArg naming "ns" (d in nanoseconds), and the
// clock stays where it was.
func (c *ManualClock) Advance(d time.Duration) error {
	h, err := c.ptr()
	if err != nil || d < 0 {
		return err
	}
	err = call(func() C.llmgov_result { return C.llmgov_manual_clock_advance(h, C.uint64_t(d)) })
	runtime.KeepAlive(c)
	return err
}

// Set moves the clock to t if that is later than its reading; a manual
// clock never goes backwards.
func (c *ManualClock) Set(t time.Duration) error {
	h, err := c.ptr()
	if err != nil {
		return err
	}
	err = call(func() C.llmgov_result { return C.llmgov_manual_clock_set(h, C.uint64_t(max(t, 0))) })
	runtime.KeepAlive(c)
	return err
}

// Now is the clock's reading; at its end, 2^63 ns, one past the longest
// Duration, it reads math.MaxInt64.
func (c *ManualClock) Now() (time.Duration, error) {
	h, err := c.ptr()
	if err != nil {
		return 0, err
	}
	var ns C.uint64_t
	err = call(func() C.llmgov_result { return C.llmgov_manual_clock_now(h, &ns) })
	runtime.KeepAlive(c)
	return nanos(ns), err
}

// Close releases the clock now rather than when it is garbage collected.
// Governors built on it keep reading it.
func (c *ManualClock) Close() {
	if c == nil || c.handle == nil {
		return
	}
	if c.closed.CompareAndSwap(false, true) {
		c.cleanup.Stop()
		C.llmgov_manual_clock_free(c.handle)
	}
}

// ptr is the C clock, or why c cannot be used: nil (or a zero
// ManualClock), or closed.
func (c *ManualClock) ptr() (*C.llmgov_manual_clock, error) {
	if c == nil || c.handle == nil {
		return nil, errNil("clock", clockMakers)
	}
	if c.closed.Load() {
		return nil, errClosed("clock")
	}
	return c.handle, nil
}
