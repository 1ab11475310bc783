package llmgov

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Event is something a governor did or learned: a local denial, a
// provider's rejection, or a circuit breaker's change.
type Event struct {
	// Kind is "denied" (refused before it left), "provider_rejected" (the
	// provider refused a request llmgov had admitted) or "breaker_changed".
	Kind string
	// Code is a denial's stable code: "rate_limited", "never_fits",
	// "circuit_open", "queue_full" or "deadline_exceeded".
	Code string
	// Scope is the scope that refused (denied, where one did) or whose
	// breaker changed (breaker_changed).
	Scope string
	// Scopes are the provider scopes of a rejected request's route.
	Scopes []string
	// Dimension is the refusing limit's: a Dimension for a denial, a
	// LimitDimension for a provider rejection; "" where none was named.
	Dimension string
	// LimitKind is why the provider refused (provider_rejected).
	LimitKind LimitKind
	// RetryAfter is when it could pass, when HasRetryAfter; at most
	// math.MaxInt64, the longest Duration.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Class is a denied request's traffic class ("" for the default).
	Class string
	// State is "open" or "closed" (breaker_changed).
	State string
	// JSON is the event as the C library gave it.
	JSON []byte
}

// eventJSON is the C library's event object.
type eventJSON struct {
	Event        string    `json:"event"`
	Code         string    `json:"code"`
	Scope        *string   `json:"scope"`
	Scopes       []string  `json:"scopes"`
	Dimension    *string   `json:"dimension"`
	Kind         LimitKind `json:"kind"`
	RetryAfterMs *uint64   `json:"retry_after_ms"`
	Class        string    `json:"class"`
	State        string    `json:"state"`
}

func parseEvent(raw []byte) (Event, error) {
	var j eventJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return Event{}, err
	}
	e := Event{Kind: j.Event, Code: j.Code, Scopes: j.Scopes, LimitKind: j.Kind, Class: j.Class, State: j.State, JSON: raw}
	if j.Scope != nil {
		e.Scope = *j.Scope
	}
	if j.Dimension != nil {
		e.Dimension = *j.Dimension
	}
	if j.RetryAfterMs != nil {
		e.RetryAfter, e.HasRetryAfter = millis(*j.RetryAfterMs), true
	}
	return e, nil
}

// eventBridge carries a governor's events from C to its Go callback. It
// holds no reference to the Governor, so a governor with a callback can
// still be garbage collected (unless the callback itself refers to it).
type eventBridge struct {
	fn atomic.Pointer[func(Event)]
	mu sync.Mutex
	// The cgo.Handle C holds as userdata; 0 until the first OnEvent.
	handle cgo.Handle
}

// release forgets the handle, once C can no longer call with it (the
// governor is freed).
func (b *eventBridge) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.handle != 0 {
		b.handle.Delete()
		b.handle = 0
	}
}

// OnEvent sets fn as the governor's event callback, replacing any before;
// OnEvent(nil) removes it. fn runs on the goroutine whose call caused the
// event, before that call returns: TryAcquire, Acquire, TryAcquireProfile
// or AcquireProfile for a denial, Permit.Report for a rejection or a
// breaker change; so it may run on several goroutines at once, and should
// return quickly. A call already under way when OnEvent returns may still
// finish with the previous fn.
//
// A panic in fn reaches the caller: the call that caused the event panics
// with the same value once the C library has returned (it never unwinds
// through the library, whose state stays sound), so it can be recovered
// there, and crashes the program otherwise, as in any goroutine. That
// call's later events are not delivered; what it did stands (a report is
// fed back; a refusal holds nothing, and only refusals and reports cause
// events).
//
// After Close (or the governor's collection) fn is never called again. A
// fn that refers to its governor keeps it from being collected: Close it.
func (g *Governor) OnEvent(fn func(Event)) error {
	h, err := g.ptr()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(g)
	b := g.events
	if fn == nil {
		b.fn.Store(nil)
		return nil
	}
	b.fn.Store(&fn)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.handle != 0 {
		return nil
	}
	handle := cgo.NewHandle(b)
	if err := call(func() C.llmgov_result { return C.go_set_event_hook(h, C.uintptr_t(handle)) }); err != nil {
		handle.Delete()
		return err
	}
	b.handle = handle
	return nil
}

// deliverHeld hands fn the events a nocallback call held (see shim.h), in
// order, and frees them. Events come only with refusals (the core tells
// of denials, and of what Report fed back), so a panic of fn here never
// strands a granted permit.
func (b *eventBridge) deliverHeld(ce *C.go_error) {
	text := C.GoBytes(unsafe.Pointer(ce.events), C.int(ce.events_len))
	C.free(unsafe.Pointer(ce.events))
	ce.events = nil
	for line := range bytes.SplitSeq(text, []byte{'\n'}) {
		if len(line) > 0 {
			b.deliver(line)
		}
	}
}

// pendingPanics counts panics of event callbacks recovered in C calls and
// not yet taken, so a call checks for one only when there is one.
var pendingPanics atomic.Int64

// takePanic takes the panic an event callback raised during the C call
// just made on this OS thread (the caller keeps the thread locked), if
// any.
func takePanic() (value any, ok bool) {
	if pendingPanics.Load() == 0 {
		return nil, false
	}
	return panicOf(C.go_take_panic())
}

// panicOf is the value of the panic whose handle C kept, if any.
func panicOf(handle C.uintptr_t) (any, bool) {
	if handle == 0 {
		return nil, false
	}
	pendingPanics.Add(-1)
	h := cgo.Handle(handle)
	defer h.Delete()
	return h.Value(), true
}

// deliver parses one event and hands it to fn, if one is set.
func (b *eventBridge) deliver(raw []byte) {
	fn := b.fn.Load()
	if fn == nil {
		return
	}
	event, err := parseEvent(raw)
	if err != nil {
		// The C library writes these objects; a failure here is a bug in
		// this binding, and an event lost is better than a crash.
		return
	}
	(*fn)(event)
}

// llmgovGoEvent delivers one event from inside a C call. A panic of fn is
// recovered here, and its value handed back to C as a cgo.Handle (0 when
// fn returned), for the caller to panic with when the C call returns.
//
//export llmgovGoEvent
func llmgovGoEvent(handle C.uintptr_t, text *C.char, n C.size_t) (caught C.uintptr_t) {
	b, ok := cgo.Handle(handle).Value().(*eventBridge)
	if !ok || b.fn.Load() == nil {
		return 0
	}
	defer func() {
		if r := recover(); r != nil {
			pendingPanics.Add(1)
			caught = C.uintptr_t(cgo.NewHandle(r))
		}
	}()
	b.deliver(C.GoBytes(unsafe.Pointer(text), C.int(n)))
	return 0
}
