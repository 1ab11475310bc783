package llmgov

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// AcquireProfile waits fairly for admission through p. It is admitted at
// once where TryAcquireProfile would admit it; otherwise it waits in the
// queue of the deployment that should pass first (the shortest retry)
// among those r's class may use: a class whose fallback_allowed is false
// waits on its own profile's deployments, never on a fallback's.
// Deployments refused by p's cost budget thresholds are not waited on;
// once admitted, the thresholds are checked again: past degrade_at the
// cheaper profile is tried at once, as for a request arriving then; past
// refuse_at the request is refused (ErrRateLimited on the "cost"
// dimension) and gives its permit back.
//
// The wait is bounded as Acquire's: by r.Deadline, its class's maximum
// wait and ctx's deadline (ErrDeadlineExceeded, at once when the predicted
// wait is already longer), and its class's queue bound (ErrQueueFull). A
// request that can never pass (ErrNeverFits, every deployment past a
// budget threshold, …) is refused at once. If ctx is cancelled first,
// AcquireProfile returns at once with an error wrapping both ctx's error
// and ErrCancelled: the request has left its queue and holds nothing. A
// refused or timed-out wait holds nothing either.
//
// r.Route is not read: each deployment's route is used. The wait parks
// the calling goroutine's OS thread. On a manual clock, call WakeWaiters
// after advancing it. Its refusals reach OnEvent's fn.
func (g *Governor) AcquireProfile(ctx context.Context, p *Profile, r Request) (*Routed, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	h, ph, err := g.withProfile(p)
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
	var routed C.llmgov_routed
	acquire := func(token *C.llmgov_cancel_token) error {
		return call(func() C.llmgov_result {
			return C.llmgov_governor_acquire_profile(h, ph, &req, timeout, token, &handle, &routed)
		})
	}
	if ctx.Done() == nil { // cannot be cancelled
		err = acquire(nil)
	} else {
		err = acquireCancellable(ctx, acquire)
	}
	runtime.KeepAlive(p)
	if err != nil {
		return nil, err
	}
	return p.routed(handle, &routed), nil
}

// acquireCancellable runs acquire with a cancel token that ctx's
// cancellation cancels, and says so in the error if it did. ctx's deadline
// cancels the token too (on a manual clock the wait's own timeout never
// comes in real time): that is a deadline, ErrDeadlineExceeded, as Acquire
// promises, not a cancel.
func acquireCancellable(ctx context.Context, acquire func(*C.llmgov_cancel_token) error) error {
	token := C.llmgov_cancel_token_new()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.llmgov_cancel_token_cancel(token)
		close(cancelled)
	})
	// Deferred, so an event callback's panic out of acquire frees it too.
	defer func() {
		if !stop() { // the cancel has started: let it finish before the token goes
			<-cancelled
		}
		C.llmgov_cancel_token_free(token)
	}()
	err := acquire(token)
	if errors.Is(err, ErrCancelled) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("llmgov: acquire: %w before admission (%w)", ctx.Err(), ErrDeadlineExceeded)
		}
		return fmt.Errorf("llmgov: acquire cancelled: %w (%w)", ctx.Err(), ErrCancelled)
	}
	return err
}
