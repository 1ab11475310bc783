package llmgov_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// collectContinuously runs the garbage collector every millisecond until
// the returned function is called.
func collectContinuously() (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				runtime.GC()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return func() { close(done) }
}

// A governor that only the call in progress refers to stays reachable
// until the call returns: collected during its own wait, its cleanup would
// free the C governor under the waiting thread (a double free, or worse).
func TestAGovernorIsNotCollectedDuringItsOwnWait(t *testing.T) {
	defer collectContinuously()()
	var returned, collectedDuringTheCall atomic.Bool
	permit, err := func() (*llmgov.Permit, error) {
		gov, err := llmgov.FromTOML(`[scopes."p"]
limits = [{ dimension = "requests", amount = 5, window = "1s" }]
`)
		if err != nil {
			return nil, err
		}
		runtime.AddCleanup(gov, func(returned *atomic.Bool) {
			if !returned.Load() {
				collectedDuringTheCall.Store(true)
			}
		}, &returned)
		route, err := gov.Route("p")
		if err != nil {
			return nil, err
		}
		for range 5 {
			p, err := gov.TryAcquire(llmgov.Request{Route: route})
			if err != nil {
				return nil, err
			}
			p.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		defer returned.Store(true)
		return gov.Acquire(ctx, llmgov.Request{Route: route}) // about 200 ms
	}()
	if err != nil {
		t.Fatal(err)
	}
	permit.Close()
	if collectedDuringTheCall.Load() {
		t.Fatal("the governor was collected while its Acquire waited")
	}
}
