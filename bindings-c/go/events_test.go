package llmgov_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

const eventsConfig = `
[adaptive.breaker]
failures = 2
pauses = ["10s"]
[scopes."openai/org"]
provider = true
limits = [{ dimension = "tokens", amount = 600, window = "1m" }]
`

type eventLog struct {
	mu     sync.Mutex
	events []llmgov.Event
}

func (l *eventLog) add(e llmgov.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) all() []llmgov.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]llmgov.Event(nil), l.events...)
}

// loggedGovernor is a governor of eventsConfig on a manual clock, its
// events logged; both are closed when the test ends.
func loggedGovernor(t *testing.T) (*llmgov.Governor, *llmgov.ManualClock, *eventLog) {
	clock := llmgov.NewManualClock(0)
	t.Cleanup(func() { clock.Close() })
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(eventsConfig, llmgov.WithClock(clock)))
	t.Cleanup(func() { gov.Close() })
	log := &eventLog{}
	if err := gov.OnEvent(log.add); err != nil {
		t.Fatal(err)
	}
	return gov, clock, log
}

func TestEventsReachTheCallback(t *testing.T) {
	gov, clock, log := loggedGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 500}))
	batch := must[llmgov.Class](t)(gov.Class("batch"))
	if _, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 200, Class: batch}); !errors.Is(err, llmgov.ErrRateLimited) {
		t.Fatalf("want rate_limited, got %v", err)
	}
	body := []byte(`{"error":{"type":"tokens","code":"rate_limit_exceeded"}}`)
	must[llmgov.Classification](t)(permit.Report(429, map[string][]string{"Retry-After": {"1"}}, body))
	must[llmgov.Classification](t)(permit.Report(503, nil, nil))
	if err := clock.Advance(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	probe := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route}))
	must[llmgov.Classification](t)(probe.Report(200, nil, []byte("{}")))

	events := log.all()
	if len(events) != 5 {
		t.Fatalf("want 5 events, got %d: %+v", len(events), events)
	}
	denied := events[0]
	if denied.Kind != "denied" || denied.Code != "rate_limited" || denied.Scope != "openai/org" ||
		denied.Dimension != "tokens" || denied.Class != "batch" || !denied.HasRetryAfter || denied.RetryAfter != 10*time.Second {
		t.Fatalf("denial: %+v", denied)
	}
	rejected := events[1]
	if rejected.Kind != "provider_rejected" || rejected.LimitKind != "rate_limited" || rejected.Dimension != "tokens" ||
		len(rejected.Scopes) != 1 || rejected.Scopes[0] != "openai/org" || rejected.RetryAfter != time.Second {
		t.Fatalf("rejection: %+v", rejected)
	}
	if events[2].LimitKind != "overloaded" {
		t.Fatalf("503: %+v", events[2])
	}
	if events[3].Kind != "breaker_changed" || events[3].Scope != "openai/org" || events[3].State != "open" {
		t.Fatalf("breaker: %+v", events[3])
	}
	if events[4].State != "closed" || !strings.Contains(string(events[4].JSON), `"state":"closed"`) {
		t.Fatalf("breaker: %+v", events[4])
	}

	// Removed: nothing more arrives.
	if err := gov.OnEvent(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}); err == nil {
		t.Fatal("want a refusal")
	}
	if n := len(log.all()); n != 5 {
		t.Fatalf("after OnEvent(nil): %d events", n)
	}
	// Set again: it arrives again.
	var again atomic.Int32
	if err := gov.OnEvent(func(llmgov.Event) { again.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if _, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}); err == nil {
		t.Fatal("want a refusal")
	}
	if again.Load() != 1 {
		t.Fatalf("want 1 event, got %d", again.Load())
	}
}

// Denials on many goroutines at once reach the callback, each once; the
// callback may call back into the governor (run under -race).
func TestEventsFromManyGoroutines(t *testing.T) {
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(eventsConfig, llmgov.WithClock(llmgov.NewManualClock(0))))
	defer gov.Close()
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	held := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}))
	defer held.Close()
	var seen atomic.Int64
	err := gov.OnEvent(func(e llmgov.Event) {
		if e.Code == "rate_limited" {
			seen.Add(1)
		}
		_, _ = gov.Snapshot() // back into the governor from inside
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if _, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1}); err == nil {
					t.Error("want a refusal")
				}
			}
		}()
	}
	wg.Wait()
	if seen.Load() != 800 {
		t.Fatalf("want 800 denials, got %d", seen.Load())
	}
}

func TestOnEventAfterClose(t *testing.T) {
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(eventsConfig))
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	var calls atomic.Int32
	if err := gov.OnEvent(func(llmgov.Event) { calls.Add(1) }); err != nil {
		t.Fatal(err)
	}
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route}))
	defer permit.Close()
	gov.Close()
	// The permit outlives the governor; its reports cause no callback.
	must[llmgov.Classification](t)(permit.Report(503, nil, nil))
	must[llmgov.Classification](t)(permit.Report(503, nil, nil))
	if calls.Load() != 0 {
		t.Fatalf("callback after Close: %d calls", calls.Load())
	}
	if err := gov.OnEvent(func(llmgov.Event) {}); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}
