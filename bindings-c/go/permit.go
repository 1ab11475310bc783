package llmgov

/*
// The hot path: C keeps none of the pointers it is given, and calls no Go
// (the events a refused try_acquire causes are held: see shim.h).
#cgo noescape go_try_acquire
#cgo nocallback go_try_acquire
#cgo noescape go_settle
#cgo nocallback go_settle
#cgo noescape go_cancel
#cgo nocallback go_cancel
#cgo noescape go_add_output
#cgo nocallback go_add_output
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"net/http"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Request is what a request asks to reserve. Only Route is required.
type Request struct {
	Route Route
	// Class is the traffic class; 0 is the default.
	Class Class
	// InputTokens is the estimated prompt, cached tokens included.
	InputTokens uint64
	// CachedInputTokens is the part of InputTokens expected from cache.
	CachedInputTokens uint64
	// MaxOutputTokens is the request's max_tokens: reserved on limits that
	// reserve max_tokens, and a cap on every output charge.
	MaxOutputTokens uint64
	// ExpectedOutputTokens, when not nil, is reserved (capped at
	// MaxOutputTokens) on limits with reserve_output = "expected".
	ExpectedOutputTokens *uint64
	// Priority orders the waiting requests of one tenant in one class:
	// higher first. Only Acquire uses it.
	Priority int32
	// Deadline is the longest Acquire may wait for this request (the
	// class's maximum wait caps it); 0 leaves it to the class. A negative
	// one is refused (ErrInvalidRequest naming "Deadline").
	Deadline time.Duration
}

func (r *Request) c() (C.llmgov_request, error) {
	if r.Deadline < 0 {
		return C.llmgov_request{}, invalidRequest("Deadline", r.Deadline.String(),
			"must not be negative (0 leaves the wait to the class's maximum wait)")
	}
	req := C.llmgov_request{
		route:               C.uint64_t(r.Route),
		class_id:            C.uint64_t(r.Class),
		input_tokens:        C.uint64_t(r.InputTokens),
		cached_input_tokens: C.uint64_t(r.CachedInputTokens),
		max_output_tokens:   C.uint64_t(r.MaxOutputTokens),
	}
	if r.ExpectedOutputTokens != nil {
		req.expected_output_tokens = C.uint64_t(*r.ExpectedOutputTokens)
		req.has_expected_output_tokens = true
	}
	req.priority = C.int32_t(r.Priority)
	if r.Deadline > 0 {
		req.deadline_ns = C.uint64_t(r.Deadline)
		req.has_deadline = true
	}
	return req, nil
}

// Usage is a request's actual token counts.
type Usage struct {
	InputTokens       uint64 // all prompt tokens, cached ones included
	CachedInputTokens uint64 // the part read from the provider's cache
	OutputTokens      uint64
}

func (u Usage) c() C.llmgov_usage {
	return C.llmgov_usage{
		input_tokens:        C.uint64_t(u.InputTokens),
		cached_input_tokens: C.uint64_t(u.CachedInputTokens),
		output_tokens:       C.uint64_t(u.OutputTokens),
	}
}

// PermitState is where a permit stands.
type PermitState uint32

// The permit states.
const (
	Pending   PermitState = 0 // reserved; the request may be in flight
	Settled   PermitState = 1 // reconciled with actual usage
	Cancelled PermitState = 2 // refunded in full
	Expired   PermitState = 3 // outlived its TTL unsettled, charged as estimated
)

func (s PermitState) String() string {
	return [...]string{"pending", "settled", "cancelled", "expired", "unknown"}[min(uint32(s), 4)]
}

// Permit is a granted reservation: settle it with the actual usage, or
// cancel it if the request was never sent. Safe for concurrent use. Its C
// memory is freed by Close or, failing that, when it is garbage collected;
// a permit dropped while pending stays charged and expires after the
// permit TTL, as in Rust.
type Permit struct {
	mu sync.Mutex
	// nil once closed, and in a zero Permit.
	handle *C.llmgov_permit
	closed bool
	// Frees the C permit if the Go one is collected first.
	cleanup runtime.Cleanup
}

// TryAcquire reserves every limit on the request's route now, or nothing.
// A refusal is an *Error with code ErrRateLimited (see RetryAfter) or
// ErrNeverFits (never retry).
func (g *Governor) TryAcquire(r Request) (*Permit, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	req, err := r.c()
	if err != nil {
		return nil, err
	}
	var handle *C.llmgov_permit
	var ce C.go_error
	result := C.go_try_acquire(h, &req, &handle, &ce)
	err = fromC(result, &ce)
	if ce.events != nil {
		g.events.deliverHeld(&ce)
	}
	if err != nil {
		return nil, err
	}
	return newPermit(handle), nil
}

func newPermit(handle *C.llmgov_permit) *Permit {
	p := &Permit{handle: handle}
	p.cleanup = runtime.AddCleanup(p, func(h *C.llmgov_permit) { C.llmgov_permit_free(h) }, handle)
	return p
}

func (p *Permit) locked(f func(h *C.llmgov_permit) error) error {
	if p == nil {
		return errNil("permit", permitMakers)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle == nil {
		return p.gone()
	}
	return f(p.handle)
}

// gone is why a permit without a handle cannot be used: closed, or a zero
// Permit. Called with p.mu held.
func (p *Permit) gone() error {
	if p.closed {
		return errClosed("permit")
	}
	return errNil("permit", permitMakers)
}

// Settle reconciles the permit with the actual usage: refunds what was
// over-reserved, charges any overage. A permit reconciles once: again is
// ErrPermitFinished; after its TTL, ErrPermitExpired.
func (p *Permit) Settle(u Usage) error {
	if p == nil {
		return errNil("permit", permitMakers)
	}
	var ce C.go_error
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle == nil {
		return p.gone()
	}
	return fromC(C.go_settle(p.handle, u.c(), &ce), &ce)
}

// Cancel refunds everything the permit reserved: for a request never sent.
func (p *Permit) Cancel() error {
	return p.locked(func(h *C.llmgov_permit) error {
		var ce C.go_error
		return fromC(C.go_cancel(h, &ce), &ce)
	})
}

// AddOutput reports tokens more of streamed output; output beyond the
// reservation is charged at once.
func (p *Permit) AddOutput(tokens uint64) error {
	return p.locked(func(h *C.llmgov_permit) error {
		var ce C.go_error
		return fromC(C.go_add_output(h, C.uint64_t(tokens), &ce), &ce)
	})
}

// Report feeds the provider's answer to this permit's request (status,
// headers, body) back into the route's provider scopes, and says how it
// was read. Call it for successes too; then settle or cancel as usual.
func (p *Permit) Report(status int, header http.Header, body []byte) (Classification, error) {
	return report(p.locked, status, header, body, func(h *C.llmgov_permit, a *cAnswer) C.llmgov_result {
		return C.llmgov_permit_report(h, a.status, a.headers, a.headersLen, a.body, a.bodyLen, a.out)
	})
}

// State is where the permit stands.
func (p *Permit) State() (PermitState, error) {
	var state C.llmgov_permit_state
	err := p.locked(func(h *C.llmgov_permit) error {
		return call(func() C.llmgov_result { return C.llmgov_permit_get_state(h, &state) })
	})
	return PermitState(state), err
}

// Charged is what is charged so far on the permit's behalf: the estimate,
// raised by streamed output beyond it.
func (p *Permit) Charged() (Usage, error) {
	var u C.llmgov_usage
	err := p.locked(func(h *C.llmgov_permit) error {
		return call(func() C.llmgov_result { return C.llmgov_permit_get_charged(h, &u) })
	})
	return Usage{uint64(u.input_tokens), uint64(u.cached_input_tokens), uint64(u.output_tokens)}, err
}

// Close frees the permit's C memory now. A pending permit is not refunded
// (cancel it first if the request was abandoned). Later calls return
// ErrClosed; Close again does nothing.
func (p *Permit) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle != nil {
		p.cleanup.Stop()
		C.llmgov_permit_free(p.handle)
		p.handle, p.closed = nil, true
	}
}

// bytesPtr points C at a Go byte slice for the duration of a call (memory
// without Go pointers may be passed).
func bytesPtr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b)))
}
