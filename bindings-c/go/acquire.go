package llmgov

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"time"
)

// Acquire waits fairly for admission: it returns once the request is
// admitted, or with ErrDeadlineExceeded (the request's Deadline, its
// class's maximum wait or ctx's deadline came first; refused at once when
// the predicted wait is already longer), ErrQueueFull or ErrNeverFits.
// Waiters are served by class priority, guarantee, then fair share across
// tenants. A refused wait holds nothing.
//
// ctx's deadline bounds the wait, on the governor's clock, and in real time
// too: a wait ctx's deadline ends returns an error wrapping both
// context.DeadlineExceeded and ErrDeadlineExceeded. If ctx is
// cancelled first, Acquire returns at once with an error wrapping both
// ctx's error and ErrCancelled: the request has left its queue, and a
// permit granted at that very moment was given back, so nothing stays
// reserved. (If admission wins the race, the permit is returned.)
//
// The wait parks the calling goroutine's OS thread. On a manual clock,
// call WakeWaiters after advancing it. Its refusals reach OnEvent's fn,
// whether given at once or after waiting.
func (g *Governor) Acquire(ctx context.Context, r Request) (*Permit, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	timeout := timeoutOf(ctx)
	req, err := r.c()
	if err != nil {
		return nil, err
	}
	var handle *C.llmgov_permit
	var ce C.go_error
	if ctx.Done() == nil { // cannot be cancelled
		err = fromC(C.go_acquire(h, &req, timeout, &handle, &ce), &ce)
	} else {
		err = acquireCancellable(ctx, func(token *C.llmgov_cancel_token) error {
			return fromC(C.go_acquire_cancellable(h, &req, timeout, token, &handle, &ce), &ce)
		})
	}
	if caught, panicked := panicOf(ce.panic); panicked {
		panic(caught)
	}
	if err != nil {
		return nil, err
	}
	return newPermit(handle), nil
}

// ctxErr is why a wait on ctx cannot start: ctx is nil (an error naming
// it, as a nil handle's), or already done (its own error).
func ctxErr(ctx context.Context) error {
	if ctx == nil {
		return errNil("ctx", ctxMakers)
	}
	return ctx.Err()
}

// timeoutOf is ctx's deadline as a wait's timeout in nanoseconds, or
// LLMGOV_NO_TIMEOUT without one.
func timeoutOf(ctx context.Context) C.uint64_t {
	if deadline, ok := ctx.Deadline(); ok {
		return C.uint64_t(max(time.Until(deadline), 0))
	}
	return C.uint64_t(C.LLMGOV_NO_TIMEOUT)
}

// WakeWaiters lets waiting requests see the clock's time now: admits whoever
// can pass and refuses whoever's deadline came. Call it after advancing a
// manual clock. It returns how long until the next time-driven change, and
// false when nothing waits on time.
func (g *Governor) WakeWaiters() (time.Duration, bool, error) {
	h, err := g.ptr()
	if err != nil {
		return 0, false, err
	}
	defer runtime.KeepAlive(g)
	var next C.uint64_t
	err = call(func() C.llmgov_result { return C.llmgov_governor_wake_waiters(h, &next) })
	if err != nil || next == C.UINT64_MAX {
		return 0, false, err
	}
	return nanos(next), true, nil
}

// QueueMetrics is every traffic class's waiting queue at one moment.
type QueueMetrics struct {
	// Depth is the requests waiting, all classes together.
	Depth   int            `json:"depth"`
	Classes []ClassMetrics `json:"classes"`
}

// ClassMetrics is one traffic class's queue; counts are since the
// governor was made.
type ClassMetrics struct {
	Class                 string `json:"class"`
	Priority              int32  `json:"priority"`
	Depth                 int    `json:"depth"`
	QueueBound            int    `json:"queue_bound"`
	OldestWaitMs          uint64 `json:"oldest_wait_ms"`
	MaxWaitMs             uint64 `json:"max_wait_ms"`
	LongestAdmittedWaitMs uint64 `json:"longest_admitted_wait_ms"`
	// Admitted counts waiters admitted; a request admitted at once while
	// nobody waits never queues and is counted only in the snapshot.
	Admitted uint64 `json:"admitted"`
	// Expired counts waiters whose deadline passed while they waited.
	Expired uint64 `json:"expired"`
	// RefusedQueueFull counts requests refused at once: the queue was full.
	RefusedQueueFull uint64 `json:"refused_queue_full"`
	// RefusedDeadline counts requests refused at once: their predicted wait
	// was past their deadline.
	RefusedDeadline uint64 `json:"refused_deadline"`
	// RefusedOther counts waiters refused because they can never be
	// admitted (or another error).
	RefusedOther uint64 `json:"refused_other"`
	// Withdrawn counts waiters that left before an answer (a cancel).
	Withdrawn uint64 `json:"withdrawn"`
	// Tenants is the tenants (flows) with waiters now.
	Tenants int `json:"tenants"`
	// Wait is how long admitted waiters waited.
	Wait WaitHistogram `json:"wait"`
	// BorrowedTokens counts tokens admitted to flows with a guaranteed
	// share beyond it, borrowed from capacity others left unused.
	BorrowedTokens uint64 `json:"borrowed_tokens"`
}

// QueueMetrics is the waiting queues now.
func (g *Governor) QueueMetrics() (*QueueMetrics, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_governor_queue_metrics_json(h, &out) })
	return decoded[QueueMetrics](takeString(out, err))
}
