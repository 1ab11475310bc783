package llmgov_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// 600 tokens a minute: 10 a second. The batch class holds one waiter.
const waitingConfig = `
[scopes."p"]
limits = [{ dimension = "tokens", amount = 600, window = "1m" }]
[classes.batch]
queue_bound = 1
`

// untilWaiting yields until depth requests wait (the goroutine has queued).
func untilWaiting(t *testing.T, gov *llmgov.Governor, depth int) {
	t.Helper()
	for {
		m, err := gov.QueueMetrics()
		if err != nil {
			t.Fatal(err)
		}
		if m.Depth == depth {
			return
		}
		runtime.Gosched()
	}
}

func inUse(t *testing.T, gov *llmgov.Governor) uint64 {
	t.Helper()
	return must[*llmgov.Snapshot](t)(gov.Snapshot()).Scopes[0].Limits[0].InUse
}

func TestAcquireWaitsForTheRefill(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(waitingConfig, llmgov.WithClock(clock)))
	route := must[llmgov.Route](t)(gov.Route("p"))
	ctx := context.Background()
	all := must[*llmgov.Permit](t)(gov.Acquire(ctx, llmgov.Request{Route: route, InputTokens: 600}))

	// A 1 s deadline against a 10 s wait: refused at once, nothing taken.
	_, err := gov.Acquire(ctx, llmgov.Request{Route: route, InputTokens: 100, Deadline: time.Second})
	var e *llmgov.Error
	if !errors.Is(err, llmgov.ErrDeadlineExceeded) || !errors.As(err, &e) || e.Waited != 0 ||
		e.RetryAfter != 10*time.Second {
		t.Fatalf("want deadline_exceeded predicting 10 s, got %v", err)
	}
	timed, cancel := context.WithTimeout(ctx, time.Second)
	_, err = gov.Acquire(timed, llmgov.Request{Route: route, InputTokens: 100})
	cancel()
	if !errors.Is(err, llmgov.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("context deadline: %v", err)
	}
	if _, err := gov.Acquire(ctx, llmgov.Request{Route: route, InputTokens: 601}); !errors.Is(err, llmgov.ErrNeverFits) {
		t.Fatalf("never fits: %v", err)
	}
	if inUse(t, gov) != 600 {
		t.Fatalf("a refused wait took something: %d in use", inUse(t, gov))
	}

	batch := must[llmgov.Class](t)(gov.Class("batch"))
	request := llmgov.Request{Route: route, Class: batch, InputTokens: 100}
	admitted := make(chan error, 1)
	go func() {
		p, err := gov.Acquire(ctx, request)
		if err == nil {
			err = p.Settle(llmgov.Usage{InputTokens: 100})
		}
		admitted <- err
	}()
	untilWaiting(t, gov, 1)
	_, err = gov.Acquire(ctx, request)
	if !errors.Is(err, llmgov.ErrQueueFull) || !errors.As(err, &e) || e.Value != "batch" {
		t.Fatalf("queue full: %v", err)
	}
	if next, ok, _ := gov.WakeWaiters(); !ok || next != 10*time.Second {
		t.Fatalf("next change in %v (%v), want 10s", next, ok)
	}
	if err := clock.Advance(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := gov.WakeWaiters(); ok {
		t.Errorf("something still waits on time")
	}
	if err := <-admitted; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if err := all.Cancel(); err != nil {
		t.Fatal(err)
	}
}

func TestContextDeadlineIsADeadlineNotACancel(t *testing.T) {
	// One slot, held: the wait depends on a release, so it is queued, and on
	// the manual clock only ctx's deadline, in real time, ends it.
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(`
[scopes."p"]
limits = [{ dimension = "concurrency", amount = 1 }]
`, llmgov.WithClock(clock)))
	route := must[llmgov.Route](t)(gov.Route("p"))
	held := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route}))
	defer held.Cancel()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := gov.Acquire(ctx, llmgov.Request{Route: route})
	if !errors.Is(err, llmgov.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, llmgov.ErrCancelled) {
		t.Fatalf("want ErrDeadlineExceeded and context.DeadlineExceeded, got %v", err)
	}
	if m := must[*llmgov.QueueMetrics](t)(gov.QueueMetrics()); m.Depth != 0 {
		t.Fatalf("queue depth %d after the deadline, want 0", m.Depth)
	}
}

func TestCancelledContextLeavesNothingReserved(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(waitingConfig, llmgov.WithClock(clock)))
	route := must[llmgov.Route](t)(gov.Route("p"))
	all := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := gov.Acquire(ctx, llmgov.Request{Route: route, InputTokens: 100})
		done <- err
	}()
	untilWaiting(t, gov, 1)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, llmgov.ErrCancelled) {
		t.Fatalf("want context.Canceled and ErrCancelled, got %v", err)
	}
	// The waiter left its queue before Acquire returned.
	if m := must[*llmgov.QueueMetrics](t)(gov.QueueMetrics()); m.Depth != 0 {
		t.Fatalf("queue depth %d after the cancel, want 0", m.Depth)
	}
	// At the refill nobody is admitted on its behalf.
	if err := clock.Advance(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	gov.WakeWaiters()
	if err := all.Cancel(); err != nil {
		t.Fatal(err)
	}
	if n := inUse(t, gov); n != 0 {
		t.Errorf("in use %d, want 0", n)
	}
	s := must[*llmgov.Snapshot](t)(gov.Snapshot())
	if s.Admitted != 1 {
		t.Errorf("admitted %d, want 1 (the abandoned waiter never was)", s.Admitted)
	}
}

// Many waiters on one context leave together when it is cancelled, each
// at once and holding nothing (run under -race).
func TestOneCancelReleasesEveryWaiter(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	defer clock.Close()
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(waitingConfig, llmgov.WithClock(clock)))
	defer gov.Close()
	route := must[llmgov.Route](t)(gov.Route("p"))
	all := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}))
	defer all.Close()
	ctx, cancel := context.WithCancel(context.Background())
	const waiters = 16
	done := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := gov.Acquire(ctx, llmgov.Request{Route: route, InputTokens: 10})
			done <- err
		}()
	}
	untilWaiting(t, gov, waiters)
	cancel()
	for range waiters {
		if err := <-done; !errors.Is(err, llmgov.ErrCancelled) {
			t.Fatalf("want ErrCancelled, got %v", err)
		}
	}
	if m := must[*llmgov.QueueMetrics](t)(gov.QueueMetrics()); m.Depth != 0 {
		t.Fatalf("queue depth %d, want 0", m.Depth)
	}
	if n := inUse(t, gov); n != 600 {
		t.Fatalf("in use %d, want the 600 held", n)
	}
}
