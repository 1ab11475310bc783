package llmgov_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// Waiting for admission by profile, on a manual clock advanced by the test
// while goroutines wait (as core/tests/routing_wait.rs).

// Three deployments taking one request per 10 s, 5 s and (the fallback,
// which the eval class may not use) 2 s.
var threePacesConfig = func() string {
	pace := func(secs int) string {
		return fmt.Sprintf(`{"provider":true,"limits":[{"dimension":"requests","amount":1,"window":"%ds"},`+
			`{"dimension":"tokens","amount":10000,"window":"1m"}]}`, secs)
	}
	return `{"scopes":{"a/org":` + pace(10) + `,"b/org":` + pace(5) + `,"c/org":` + pace(2) + `},` +
		`"profiles":{"main":{"deployments":["a/org","b/org"],"fallback":"spare","fallback_allowed":{"eval":false}},` +
		`"spare":{"deployments":["c/org"]}}}`
}()

// One deployment, and a tenant's daily budget of 1.0 refused at 30%.
const budgetedConfig = `{"pricing":{"gpt-4o":{"input":2.5,"output":10.0}},"scopes":{` +
	`"openai/gpt-4o":{"provider":true,"pricing":"gpt-4o","limits":[{"dimension":"tokens","amount":150000,"window":"1m"}]},` +
	`"tenants/*":{"limits":[{"dimension":"cost","budget":1.0,"window":"1d"}]}},` +
	`"profiles":{"gpt-4o":{"deployments":["openai/gpt-4o"],"budget":{"refuse_at":0.3}}}}`

type profileGovernor struct {
	gov     *llmgov.Governor
	clock   *llmgov.ManualClock
	profile *llmgov.Profile
}

func newProfileGovernor(t *testing.T, config, profile string, consumerPaths ...string) profileGovernor {
	t.Helper()
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromJSON(config, llmgov.WithClock(clock)))
	p := must[*llmgov.Profile](t)(gov.Profile(profile, consumerPaths...))
	t.Cleanup(func() { p.Close(); gov.Close(); clock.Close() })
	return profileGovernor{gov, clock, p}
}

// allBusy is threePacesConfig with every deployment's one request taken.
func allBusy(t *testing.T) profileGovernor {
	t.Helper()
	g := newProfileGovernor(t, threePacesConfig, "main")
	for _, want := range []string{"a/org", "b/org", "c/org"} {
		routed := must[*llmgov.Routed](t)(g.gov.AcquireProfile(context.Background(), g.profile, llmgov.Request{InputTokens: 10}))
		if routed.Deployment != want {
			t.Fatalf("admitted at once on %s, want %s", routed.Deployment, want)
		}
	}
	return g
}

func (g profileGovernor) advance(t *testing.T, d time.Duration) {
	t.Helper()
	if err := g.clock.Advance(d); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.gov.WakeWaiters(); err != nil {
		t.Fatal(err)
	}
}

func (g profileGovernor) depthIs(t *testing.T, want int) {
	t.Helper()
	if m := must[*llmgov.QueueMetrics](t)(g.gov.QueueMetrics()); m.Depth != want {
		t.Fatalf("queue depth %d, want %d", m.Depth, want)
	}
}

// limit is path's limit on dimension now.
func (g profileGovernor) limit(t *testing.T, path string, dimension llmgov.Dimension) llmgov.LimitSnapshot {
	t.Helper()
	scope := must[*llmgov.ScopeSnapshot](t)(g.gov.ScopeSnapshot(must[llmgov.Scope](t)(g.gov.Scope(path))))
	for _, l := range scope.Limits {
		if l.Dimension == dimension {
			return l
		}
	}
	t.Fatalf("%s has no %s limit", path, dimension)
	return llmgov.LimitSnapshot{}
}

type profileOutcome struct {
	routed *llmgov.Routed
	err    error
}

// waitFor acquires r through the profile on another goroutine.
func (g profileGovernor) waitFor(ctx context.Context, r llmgov.Request) <-chan profileOutcome {
	done := make(chan profileOutcome, 1)
	go func() {
		routed, err := g.gov.AcquireProfile(ctx, g.profile, r)
		done <- profileOutcome{routed, err}
	}()
	return done
}

func TestAcquireProfileWaitsOnTheDeploymentThatPassesFirstItsClassMayUse(t *testing.T) {
	g := allBusy(t)
	eval := must[llmgov.Class](t)(g.gov.Class("eval"))
	ctx := context.Background()
	anyClass := g.waitFor(ctx, llmgov.Request{InputTokens: 10})
	ownProfile := g.waitFor(ctx, llmgov.Request{InputTokens: 10, Class: eval})
	untilWaiting(t, g.gov, 2)

	// The fallback frees first (2 s): the default class takes it.
	g.advance(t, 2*time.Second)
	got := <-anyClass
	if got.err != nil {
		t.Fatal(got.err)
	}
	if r := got.routed; r.Deployment != "c/org" || r.Profile != "spare" || !r.FellBack || r.Degraded {
		t.Fatalf("want the fallback c/org, got %+v", r)
	}
	// eval never leaves its profile: it waits on b, its soonest (5 s).
	g.depthIs(t, 1)
	g.advance(t, 3*time.Second)
	got = <-ownProfile
	if got.err != nil {
		t.Fatal(got.err)
	}
	if r := got.routed; r.Deployment != "b/org" || r.Profile != "main" || r.FellBack {
		t.Fatalf("want b/org of its own profile, got %+v", r)
	}
	// The permits are ordinary ones, held on the chosen routes.
	for path, want := range map[string]uint64{"a/org": 1, "b/org": 2, "c/org": 2} {
		if held := g.limit(t, path, "requests").Reserved; held != want {
			t.Errorf("%s holds %d requests, want %d", path, held, want)
		}
	}
	if err := got.routed.Permit.Settle(llmgov.Usage{InputTokens: 10, OutputTokens: 5}); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireProfileRefusesAtOnceWhatCanNeverPassAndAShortDeadline(t *testing.T) {
	g := allBusy(t)
	ctx := context.Background()
	// Nobody advances the clock: these can only return at once.
	_, err := g.gov.AcquireProfile(ctx, g.profile, llmgov.Request{InputTokens: 20000})
	var e *llmgov.Error
	if !errors.Is(err, llmgov.ErrNeverFits) || !errors.As(err, &e) || e.Dimension != "tokens" {
		t.Fatalf("want never_fits on tokens, got %v", err)
	}
	// The soonest deployment passes in 2 s: a 1 s deadline cannot be met,
	// the request's own or ctx's.
	_, err = g.gov.AcquireProfile(ctx, g.profile, llmgov.Request{InputTokens: 10, Deadline: time.Second})
	if !errors.Is(err, llmgov.ErrDeadlineExceeded) || !errors.As(err, &e) || e.RetryAfter != 2*time.Second || e.Waited != 0 {
		t.Fatalf("want deadline_exceeded predicting 2 s, got %v", err)
	}
	timed, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = g.gov.AcquireProfile(timed, g.profile, llmgov.Request{InputTokens: 10})
	if !errors.Is(err, llmgov.ErrDeadlineExceeded) || !errors.As(err, &e) || e.RetryAfter != 2*time.Second {
		t.Fatalf("ctx deadline: want deadline_exceeded predicting 2 s, got %v", err)
	}
	g.depthIs(t, 0)
	if held := g.limit(t, "c/org", "requests").Reserved; held != 1 {
		t.Fatalf("a refusal took something: c/org holds %d", held)
	}
}

func TestAcquireProfileLeavesTheQueueWhenCtxIsCancelled(t *testing.T) {
	g := allBusy(t)
	ctx, cancel := context.WithCancel(context.Background())
	waiting := g.waitFor(ctx, llmgov.Request{InputTokens: 10})
	untilWaiting(t, g.gov, 1)
	cancel()
	got := <-waiting
	if !errors.Is(got.err, context.Canceled) || !errors.Is(got.err, llmgov.ErrCancelled) || got.routed != nil {
		t.Fatalf("want context.Canceled and ErrCancelled, got %v, %+v", got.err, got.routed)
	}
	// It left its queue before returning; at the refill nobody takes c.
	g.depthIs(t, 0)
	g.advance(t, 2*time.Second)
	if c := g.limit(t, "c/org", "requests"); c.InUse != 0 || c.Reserved != 1 {
		t.Fatalf("c/org after the refill: in use %d, reserved %d; want 0 and the busy permit's 1", c.InUse, c.Reserved)
	}
	// A ctx cancelled already: nothing is tried.
	if _, err := g.gov.AcquireProfile(ctx, g.profile, llmgov.Request{InputTokens: 10}); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	// A live cancellable ctx: admitted as usual.
	live, stop := context.WithCancel(context.Background())
	defer stop()
	routed := must[*llmgov.Routed](t)(g.gov.AcquireProfile(live, g.profile, llmgov.Request{InputTokens: 10}))
	if routed.Deployment != "c/org" {
		t.Fatalf("want c/org, got %+v", routed)
	}
}

func TestAcquireProfileRefusesWhenABudgetThresholdIsCrossedWhileWaiting(t *testing.T) {
	g := newProfileGovernor(t, budgetedConfig, "gpt-4o", "tenants/acme")
	// 100k input: 0.25 each.
	request := llmgov.Request{InputTokens: 100_000}
	must[*llmgov.Routed](t)(g.gov.TryAcquireProfile(g.profile, request))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := g.waitFor(ctx, request)
	untilWaiting(t, g.gov, 1) // 50k tokens left of 150k a minute

	// Meanwhile a request straight on the route takes the spend to 0.35,
	// and 40k more tokens: 10k left, so the waiter needs 36 s of refill.
	route := must[llmgov.Route](t)(g.gov.Route("tenants/acme", "openai/gpt-4o"))
	must[*llmgov.Permit](t)(g.gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 40_000}))
	g.advance(t, 35*time.Second)
	g.depthIs(t, 1)
	g.advance(t, time.Second)
	got := <-waiting
	var e *llmgov.Error
	if !errors.Is(got.err, llmgov.ErrRateLimited) || !errors.As(got.err, &e) || e.Dimension != "cost" ||
		e.Scope != "tenants/acme" {
		t.Fatalf("want the threshold's refusal on tenants/acme's cost, got %v", got.err)
	}
	// The waiter's permit was cancelled: 0.25 + 0.10 stay (in millionths),
	// and the two others' 140k tokens.
	if cost := g.limit(t, "tenants/acme", "cost").InUse; cost != 350_000 {
		t.Errorf("tenant cost in use %d, want 350000", cost)
	}
	if tokens := g.limit(t, "openai/gpt-4o", "tokens").Reserved; tokens != 140_000 {
		t.Errorf("tokens reserved %d, want 140000", tokens)
	}
}

func TestAcquireProfileBadInput(t *testing.T) {
	g := allBusy(t)
	ctx := context.Background()
	_, err := g.gov.AcquireProfile(ctx, g.profile, llmgov.Request{Class: 99})
	var e *llmgov.Error
	if !errors.Is(err, llmgov.ErrInvalidRequest) || !errors.As(err, &e) || e.Field != "class_id" || e.Value != "99" {
		t.Fatalf("want invalid_request naming class_id, got %v", err)
	}
	other := newProfileGovernor(t, threePacesConfig, "main")
	_, err = other.gov.AcquireProfile(ctx, g.profile, llmgov.Request{})
	if !errors.Is(err, llmgov.ErrInvalidRequest) || !errors.As(err, &e) || e.Field != "profile" {
		t.Fatalf("want invalid_request naming profile, got %v", err)
	}
	closed := must[*llmgov.Profile](t)(g.gov.Profile("main"))
	closed.Close()
	if _, err := g.gov.AcquireProfile(ctx, closed, llmgov.Request{}); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}
