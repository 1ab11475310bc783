package llmgov_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// reservedOn is what pending permits hold on every limit of gov.
func reservedOn(t *testing.T, gov *llmgov.Governor) uint64 {
	t.Helper()
	var total uint64
	for _, s := range must[*llmgov.Snapshot](t)(gov.Snapshot()).Scopes {
		for _, l := range s.Limits {
			total += l.Reserved
		}
	}
	return total
}

func TestNilAndZeroHandlesAreErrorsNamingThem(t *testing.T) {
	gov, _ := routingGovernor(t)
	ctx := context.Background()
	_, err := gov.TryAcquireProfile(nil, llmgov.Request{InputTokens: 1})
	wantArgError(t, "TryAcquireProfile(nil)", err, llmgov.ErrNullArgument, "profile", "")
	_, err = gov.AcquireProfile(ctx, nil, llmgov.Request{InputTokens: 1})
	wantArgError(t, "AcquireProfile(nil)", err, llmgov.ErrNullArgument, "profile", "")
	_, err = gov.TryAcquireProfile(&llmgov.Profile{}, llmgov.Request{InputTokens: 1})
	wantArgError(t, "a zero Profile", err, llmgov.ErrNullArgument, "profile", "")

	for name, g := range map[string]*llmgov.Governor{"nil": nil, "zero": {}} {
		_, err = g.Route("openai/org")
		wantArgError(t, name+" Governor.Route", err, llmgov.ErrNullArgument, "governor", "")
		_, err = g.TryAcquire(llmgov.Request{})
		wantArgError(t, name+" Governor.TryAcquire", err, llmgov.ErrNullArgument, "governor", "")
		_, err = g.Snapshot()
		wantArgError(t, name+" Governor.Snapshot", err, llmgov.ErrNullArgument, "governor", "")
		err = g.OnEvent(func(llmgov.Event) {})
		wantArgError(t, name+" Governor.OnEvent", err, llmgov.ErrNullArgument, "governor", "")
		_, err = g.TryAcquireProfile(nil, llmgov.Request{})
		wantArgError(t, name+" Governor.TryAcquireProfile", err, llmgov.ErrNullArgument, "governor", "")
		g.Close()
	}
	for name, p := range map[string]*llmgov.Permit{"nil": nil, "zero": {}} {
		wantArgError(t, name+" Permit.Settle", p.Settle(llmgov.Usage{}), llmgov.ErrNullArgument, "permit", "")
		wantArgError(t, name+" Permit.Cancel", p.Cancel(), llmgov.ErrNullArgument, "permit", "")
		_, err = p.Report(429, nil, nil)
		wantArgError(t, name+" Permit.Report", err, llmgov.ErrNullArgument, "permit", "")
		_, err = p.State()
		wantArgError(t, name+" Permit.State", err, llmgov.ErrNullArgument, "permit", "")
		p.Close()
	}
	var nilProfile *llmgov.Profile
	nilProfile.Close()
	for name, c := range map[string]*llmgov.ManualClock{"nil": nil, "zero": {}} {
		wantArgError(t, name+" ManualClock.Advance", c.Advance(time.Second), llmgov.ErrNullArgument, "clock", "")
		_, err = c.Now()
		wantArgError(t, name+" ManualClock.Now", err, llmgov.ErrNullArgument, "clock", "")
		_, err = llmgov.FromTOML(config, llmgov.WithClock(c))
		if name == "zero" {
			wantArgError(t, "WithClock(zero clock)", err, llmgov.ErrNullArgument, "clock", "")
		}
		c.Close()
	}
}

func TestClosedHandlesAreErrorsWithACode(t *testing.T) {
	gov, profile := routingGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1}))
	must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: 1})).Permit.Cancel()
	wantClosed := func(what string, err error, field string) {
		t.Helper()
		wantArgError(t, what, err, llmgov.ErrInvalidArg, field, "closed")
		if !errors.Is(err, llmgov.ErrClosed) {
			t.Errorf("%s: errors.Is(err, ErrClosed) is false: %v", what, err)
		}
	}
	permit.Close()
	wantClosed("Permit.Settle", permit.Settle(llmgov.Usage{}), "permit")
	wantClosed("Permit.AddOutput", permit.AddOutput(1), "permit")
	profile.Close()
	_, err := gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: 1})
	wantClosed("TryAcquireProfile", err, "profile")
	_, err = gov.AcquireProfile(context.Background(), profile, llmgov.Request{InputTokens: 1})
	wantClosed("AcquireProfile", err, "profile")
	gov.Close()
	_, err = gov.TryAcquire(llmgov.Request{Route: route})
	wantClosed("Governor.TryAcquire", err, "governor")
	_, err = gov.Route("openai/org")
	wantClosed("Governor.Route", err, "governor")
	clock := llmgov.NewManualClock(0)
	clock.Close()
	wantClosed("ManualClock.Set", clock.Set(time.Second), "clock")
	_, err = llmgov.FromTOML(config, llmgov.WithClock(clock))
	wantClosed("WithClock(closed clock)", err, "clock")
	// Other codes are not ErrClosed.
	if errors.Is(&llmgov.Error{Code: llmgov.ErrInvalidArg}, llmgov.ErrClosed) {
		t.Error("an invalid argument that is no closed handle is ErrClosed")
	}
}

func TestANegativeDeadlineIsRefused(t *testing.T) {
	gov, _ := newGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("tenants/a"))
	ctx := context.Background()
	request := llmgov.Request{Route: route, InputTokens: 1, Deadline: -time.Second}
	_, err := gov.Acquire(ctx, request)
	wantArgError(t, "Acquire", err, llmgov.ErrInvalidRequest, "Deadline", "-1s")
	cancellable, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = gov.Acquire(cancellable, request)
	wantArgError(t, "Acquire (cancellable)", err, llmgov.ErrInvalidRequest, "Deadline", "-1s")
	_, err = gov.TryAcquire(request)
	wantArgError(t, "TryAcquire", err, llmgov.ErrInvalidRequest, "Deadline", "-1s")
	routing, profile := routingGovernor(t)
	_, err = routing.TryAcquireProfile(profile, llmgov.Request{InputTokens: 1, Deadline: -time.Nanosecond})
	wantArgError(t, "TryAcquireProfile", err, llmgov.ErrInvalidRequest, "Deadline", "-1ns")
	_, err = routing.AcquireProfile(ctx, profile, llmgov.Request{InputTokens: 1, Deadline: -time.Minute})
	wantArgError(t, "AcquireProfile", err, llmgov.ErrInvalidRequest, "Deadline", "-1m0s")
	if n := reservedOn(t, gov) + reservedOn(t, routing); n != 0 {
		t.Errorf("refused requests hold %d", n)
	}
	// Zero leaves the wait to the class: admitted at once here.
	request.Deadline = 0
	must[*llmgov.Permit](t)(gov.Acquire(ctx, request)).Cancel()
}

const panickingConfig = `
[adaptive.breaker]
failures = 1
pauses = ["30s"]
[scopes."openai/org"]
provider = true
limits = [{ dimension = "tokens", amount = 1000, window = "1m" }]
[profiles."gpt-4o"]
deployments = ["openai/org"]
`

// recovered runs f and returns what it panicked with.
func recovered(f func()) (value any) {
	defer func() { value = recover() }()
	f()
	return nil
}

// A panic in OnEvent's fn reaches the caller, whether the event was held
// for Go (TryAcquire) or delivered from inside the C call (Report,
// Acquire, AcquireProfile), and leaves the governor usable: the report
// applied, later events delivered, and Close returns (it hung when the
// panic unwound through the library, skipping its bookkeeping).
func TestAPanicInOnEventReachesTheCallerAndLeavesTheGovernorSound(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	defer clock.Close()
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(panickingConfig, llmgov.WithClock(clock)))
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 900})).Close()
	if err := gov.OnEvent(func(e llmgov.Event) { panic("listener bug: " + e.Kind) }); err != nil {
		t.Fatal(err)
	}
	if v := recovered(func() { gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 500}) }); v != "listener bug: denied" {
		t.Errorf("TryAcquire: want the listener's panic, got %v", v)
	}
	if v := recovered(func() {
		gov.Acquire(context.Background(), llmgov.Request{Route: route, InputTokens: 500, Deadline: time.Second})
	}); v != "listener bug: denied" {
		t.Errorf("Acquire: want the listener's panic, got %v", v)
	}
	if v := recovered(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gov.Acquire(ctx, llmgov.Request{Route: route, InputTokens: 500, Deadline: time.Second})
	}); v != "listener bug: denied" {
		t.Errorf("Acquire (cancellable): want the listener's panic, got %v", v)
	}
	small := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 10}))
	// Two events from inside C (a rejection, then the breaker opening):
	// the first panic ends the call's deliveries.
	if v := recovered(func() { small.Report(429, http.Header{"Retry-After": {"1"}}, nil) }); v != "listener bug: provider_rejected" {
		t.Errorf("Report: want the listener's panic, got %v", v)
	}
	if s := must[*llmgov.Snapshot](t)(gov.Snapshot()); s.AdmittedThenProviderRejected != 1 || s.Scopes[0].Breaker != "open" {
		t.Errorf("the report was not applied: %+v", s)
	}
	// Refused at once by profile (the breaker's pause is past the
	// deadline), with and without a cancellable ctx.
	profile := must[*llmgov.Profile](t)(gov.Profile("gpt-4o"))
	defer profile.Close()
	for _, ctx := range []context.Context{context.Background(), t.Context()} {
		if v := recovered(func() {
			gov.AcquireProfile(ctx, profile, llmgov.Request{InputTokens: 1, Deadline: time.Second})
		}); v != "listener bug: denied" {
			t.Errorf("AcquireProfile: want the listener's panic, got %v", v)
		}
	}

	// Replaced by a fn that returns: every later event is delivered.
	var seen []string
	if err := gov.OnEvent(func(e llmgov.Event) { seen = append(seen, e.Code) }); err != nil {
		t.Fatal(err)
	}
	if _, err := gov.TryAcquire(llmgov.Request{Route: route}); !errors.Is(err, llmgov.ErrCircuitOpen) {
		t.Fatalf("want circuit_open, got %v", err)
	}
	if strings.Join(seen, ",") != "circuit_open" {
		t.Errorf("after the panics, want one circuit_open event, got %v", seen)
	}
	closed := make(chan struct{})
	go func() { gov.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung after a panicking callback")
	}
}
