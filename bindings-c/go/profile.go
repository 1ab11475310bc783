package llmgov

/*
#cgo noescape go_try_acquire_profile
#cgo nocallback go_try_acquire_profile
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Profile is a model profile (a [profiles.<name>] of the configuration)
// and its fallback chain, resolved once for a consumer's scope paths. Safe
// for concurrent use.
type Profile struct {
	handle  *C.llmgov_profile
	closed  atomic.Bool
	cleanup runtime.Cleanup
	// Go copies of the names C hands back, by their C address (stable for
	// the profile's life), so an acquire allocates no strings.
	names sync.Map
}

// Routed is a request admitted through a profile, and where it goes.
type Routed struct {
	// Permit is the reservation, on the chosen deployment's route: settle
	// or cancel it as any other.
	Permit *Permit
	// Profile is the profile that served it (a fallback's, if it fell
	// back).
	Profile string
	// Deployment is the chosen deployment's scope path.
	Deployment string
	// FellBack is whether it left the profile asked for through a
	// fallback.
	FellBack bool
	// Degraded is whether it left the profile asked for because a cost
	// budget passed the profile's degrade_at threshold.
	Degraded bool
}

// Profile resolves profile name and its fallback chain for a consumer's
// scope paths (such as "tenants/acme"; none is fine): every deployment's
// route charges the consumer's scopes too. An unknown name is an *Error
// with code ErrInvalidRequest, Field "profile" and Value the name.
func (g *Governor) Profile(name string, consumerPaths ...string) (*Profile, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	cname, err := cString("name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	cpaths, free, err := cStrings("consumer_paths", consumerPaths)
	if err != nil {
		return nil, err
	}
	defer free()
	var handle *C.llmgov_profile
	err = call(func() C.llmgov_result {
		return C.llmgov_profile_new(h, cname, &cpaths[0], C.size_t(len(consumerPaths)), &handle)
	})
	if err != nil {
		return nil, err
	}
	p := &Profile{handle: handle}
	p.cleanup = runtime.AddCleanup(p, func(h *C.llmgov_profile) { C.llmgov_profile_free(h) }, handle)
	return p, nil
}

// Close frees the profile now rather than when it is garbage collected.
// It must not run concurrently with acquires through the profile; later
// acquires return ErrClosed.
func (p *Profile) Close() {
	if p == nil || p.handle == nil {
		return
	}
	if p.closed.CompareAndSwap(false, true) {
		p.cleanup.Stop()
		C.llmgov_profile_free(p.handle)
	}
}

func (p *Profile) name(c *C.char) string {
	if s, ok := p.names.Load(c); ok {
		return s.(string)
	}
	s := C.GoString(c)
	p.names.Store(c, s)
	return s
}

// TryAcquireProfile admits r on the deployment of p with the most
// normalized headroom (keys of one organisation share its pool), skipping
// open breakers and trying the next deployment when one refuses; when all
// refuse, it falls back along p's chain if r's class may. Otherwise it
// returns the first profile's refusal (ErrRateLimited with the scope and
// retry time, ErrCircuitOpen, ErrNeverFits), never switching silently.
// Past a cost budget's degrade_at threshold it serves from the profile's
// cheaper degrade_to profile (Degraded) if the class may leave; past
// refuse_at it refuses on the "cost" dimension.
// r.Route is not read: each deployment's route is used.
func (g *Governor) TryAcquireProfile(p *Profile, r Request) (*Routed, error) {
	h, ph, err := g.withProfile(p)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	req, err := r.c()
	if err != nil {
		return nil, err
	}
	var handle *C.llmgov_permit
	var routed C.llmgov_routed
	var ce C.go_error
	result := C.go_try_acquire_profile(h, ph, &req, &handle, &routed, &ce)
	err = fromC(result, &ce)
	if ce.events != nil {
		g.events.deliverHeld(&ce)
	}
	if err != nil {
		return nil, err
	}
	return p.routed(handle, &routed), nil
}

// withProfile is the C governor and profile, or why either cannot be
// used: nil (or a zero value), or closed.
func (g *Governor) withProfile(p *Profile) (*C.llmgov_governor, *C.llmgov_profile, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, nil, err
	}
	if p == nil || p.handle == nil {
		return nil, nil, errNil("profile", profileMakers)
	}
	if p.closed.Load() {
		return nil, nil, errClosed("profile")
	}
	return h, p.handle, nil
}

// routed is what C said of an admitted request, in Go.
func (p *Profile) routed(handle *C.llmgov_permit, routed *C.llmgov_routed) *Routed {
	out := &Routed{
		Permit:     newPermit(handle),
		Profile:    p.name(routed.profile),
		Deployment: p.name(routed.deployment),
		FellBack:   bool(routed.fell_back),
		Degraded:   bool(routed.degraded),
	}
	runtime.KeepAlive(p)
	return out
}
