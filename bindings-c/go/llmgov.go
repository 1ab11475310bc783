// Package llmgov is a rate-limit governor for LLM APIs: before a request
// leaves, it reserves every limit the request is subject to (requests,
// input, output and total tokens, requests in flight) on every scope it
// touches, all at once or not at all; after the response it reconciles the
// reservation with the provider's actual usage.
//
// It wraps libllmgov, the C ABI of the Rust core, through cgo: one cgo call
// per admission and one per settle. Build with the library on the linker's
// path (`make test-go` sets CGO_LDFLAGS to the cargo target directory).
//
// Errors wrap stable codes: errors.Is(err, llmgov.ErrRateLimited) tells a
// refusal, and errors.As(err, &e) with e a *llmgov.Error gives the scope,
// dimension and retry time.
package llmgov

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#cgo LDFLAGS: -lllmgov
#include <stdlib.h>
#include "llmgov.h"
*/
import "C"

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Governor admits and reconciles requests. Its methods may be called from
// any number of goroutines at once.
type Governor struct {
	handle  *C.llmgov_governor
	closed  atomic.Bool
	cleanup runtime.Cleanup
	clock   *ManualClock
	events  *eventBridge
}

// resources is what a governor's cleanup frees: never the Governor itself,
// so that it can be collected.
type resources struct {
	handle *C.llmgov_governor
	events *eventBridge
}

// free releases the C governor (which removes its event callback and waits
// for calls under way) and then the callback's handle.
func (r resources) free() {
	C.llmgov_governor_free(r.handle)
	r.events.release()
}

// Option configures a governor at construction.
type Option func(*options)

type options struct {
	clock *ManualClock
}

// WithClock makes the governor read a manual clock instead of the
// monotonic clock: time moves only when the clock is advanced. For tests.
func WithClock(clock *ManualClock) Option {
	return func(o *options) { o.clock = clock }
}

// FromTOML builds a governor from a TOML configuration. A bad config is an
// *Error with code ErrInvalidConfig naming the field and the value.
func FromTOML(config string, opts ...Option) (*Governor, error) {
	return build("toml", config, opts, func(text *C.char, clock *C.llmgov_manual_clock, out **C.llmgov_governor) C.llmgov_result {
		return C.llmgov_governor_from_toml(text, clock, out)
	})
}

// FromJSON builds a governor from a JSON configuration (the fields of the
// TOML form).
func FromJSON(config string, opts ...Option) (*Governor, error) {
	return build("json", config, opts, func(text *C.char, clock *C.llmgov_manual_clock, out **C.llmgov_governor) C.llmgov_result {
		return C.llmgov_governor_from_json(text, clock, out)
	})
}

// FromPreset builds a governor from a shipped preset, such as
// "openai-gpt-4o-tier1".
func FromPreset(name string, opts ...Option) (*Governor, error) {
	return build("name", name, opts, func(text *C.char, clock *C.llmgov_manual_clock, out **C.llmgov_governor) C.llmgov_result {
		return C.llmgov_governor_from_preset(text, clock, out)
	})
}

type constructor func(*C.char, *C.llmgov_manual_clock, **C.llmgov_governor) C.llmgov_result

// build makes a governor from text, the argument C names field.
func build(field, text string, opts []Option, make constructor) (*Governor, error) {
	handle, o, err := construct(field, text, opts, make)
	if err != nil {
		return nil, err
	}
	g := &Governor{handle: handle, clock: o.clock, events: &eventBridge{}}
	g.cleanup = runtime.AddCleanup(g, resources.free, resources{handle, g.events})
	return g, nil
}

// construct calls a C constructor of handle H (a pointer: cgo's handle
// types are incomplete) on text (the argument C names field) and the
// options' clock; it gives back the handle and the options, whose clock the
// governor must keep alive.
func construct[H any](field, text string, opts []Option, make func(*C.char, *C.llmgov_manual_clock, *H) C.llmgov_result) (H, options, error) {
	var handle H
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	ctext, err := cString(field, text)
	if err != nil {
		return handle, o, err
	}
	defer C.free(unsafe.Pointer(ctext))
	var clock *C.llmgov_manual_clock
	if o.clock != nil {
		if clock, err = o.clock.ptr(); err != nil {
			return handle, o, err
		}
	}
	if err := call(func() C.llmgov_result { return make(ctext, clock, &handle) }); err != nil {
		return handle, o, err
	}
	// The governor holds its own reference to the clock.
	runtime.KeepAlive(o.clock)
	return handle, o, nil
}

// Close releases the governor now rather than when it is garbage
// collected. Permits and profiles not yet closed keep it alive, and
// permits can still be settled. Its event callback is never called after
// Close returns (so fn must not call Close). Close must not run
// concurrently with other methods; later calls return ErrClosed.
func (g *Governor) Close() {
	if g == nil || g.handle == nil {
		return
	}
	if g.closed.CompareAndSwap(false, true) {
		g.cleanup.Stop()
		resources{g.handle, g.events}.free()
	}
}

// ptr is the C governor, or why g cannot be used: nil (or a zero
// Governor), or closed. Callers keep g alive (runtime.KeepAlive, or a use
// of g after the call) until C is done with the handle: were g unreachable
// during the call, its cleanup could free the handle under it.
func (g *Governor) ptr() (*C.llmgov_governor, error) {
	if g == nil || g.handle == nil {
		return nil, errNil("governor", governorMakers)
	}
	if g.closed.Load() {
		return nil, errClosed("governor")
	}
	return g.handle, nil
}

// Route is a set of scopes a request is charged on, resolved once from its
// paths. It is a plain number, valid with the governor that made it: it
// carries that governor's tag, so another governor refuses it
// (ErrInvalidRequest naming "route") rather than charging its own route of
// the same index. It is never 0.
type Route uint64

// Class is a traffic class, interned by name; 0 is the default class on
// every governor. Like a Route, a named class is valid with the governor
// that made it only (another refuses it: ErrInvalidRequest naming
// "class_id").
type Class uint64

// Scope is an interned scope, for ScopeSnapshot; like a Route it is valid
// only with the governor that made it.
type Scope uint64

// Route resolves scope paths to a route: every configured or template
// scope on every prefix of every path, each once. Resolve once and reuse
// the route on the hot path.
func (g *Governor) Route(paths ...string) (Route, error) {
	h, err := g.ptr()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(g)
	cpaths, free, err := cStrings("paths", paths)
	if err != nil {
		return 0, err
	}
	defer free()
	var route C.uint64_t
	err = call(func() C.llmgov_result {
		return C.llmgov_governor_route(h, &cpaths[0], C.size_t(len(paths)), &route)
	})
	return Route(route), err
}

// Class interns a traffic class by name. Output lengths are learned per
// route and class.
func (g *Governor) Class(name string) (Class, error) {
	h, err := g.ptr()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(g)
	cname, err := cString("name", name)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cname))
	var class C.uint64_t
	err = call(func() C.llmgov_result { return C.llmgov_governor_class(h, cname, &class) })
	return Class(class), err
}

// Scope interns one scope path (creating a template scope met for the
// first time) and names the deepest scope on it.
func (g *Governor) Scope(path string) (Scope, error) {
	h, err := g.ptr()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(g)
	cpath, err := cString("path", path)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cpath))
	var scope C.uint64_t
	err = call(func() C.llmgov_result { return C.llmgov_governor_scope(h, cpath, &scope) })
	return Scope(scope), err
}

// Now is the governor's clock reading: the manual clock's, or the time
// since the governor was built.
func (g *Governor) Now() (time.Duration, error) {
	h, err := g.ptr()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(g)
	var ns C.uint64_t
	err = call(func() C.llmgov_result { return C.llmgov_governor_now(h, &ns) })
	return nanos(ns), err
}

// Version is the version of the linked libllmgov.
func Version() string {
	return C.GoString(C.llmgov_version())
}
