package llmgov_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// The RedisGovernor against the redis-server named by LLMGOV_REDIS_URL
// (`make test-go` starts one); skipped without it.

const redisScope = "openai/org/gpt-4o"

var redisPrefixes atomic.Int64

func redisURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("LLMGOV_REDIS_URL")
	if url == "" {
		t.Skip("LLMGOV_REDIS_URL is not set (`make test-go` starts a redis-server)")
	}
	return url
}

// redisConfig puts limits on the shared scope, on prefix; the url comes
// from LLMGOV_REDIS_URL. A slow call is no outage (under -race): timeout 2s.
func redisConfig(prefix, limits string) string {
	return fmt.Sprintf(`
[scopes.%q]
limits = [%s]
[redis]
prefix = %q
expected_processes = 2
timeout = "2s"
[redis.scopes.%q]
mode = "exact"
`, redisScope, limits, prefix, redisScope)
}

func freshPrefix(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid(),
		time.Now().UnixNano(), redisPrefixes.Add(1))
}

func redisGovernor(t *testing.T, prefix, limits string) (*llmgov.RedisGovernor, llmgov.RedisRoute) {
	t.Helper()
	redisURL(t)
	gov, err := llmgov.NewRedisGovernorFromTOML(redisConfig(prefix, limits))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gov.Close)
	route, err := gov.Route(redisScope)
	if err != nil {
		t.Fatal(err)
	}
	return gov, route
}

const (
	tenAMinute  = `{ dimension = "requests", amount = 10, window = "1m" }`
	fiveASecond = `{ dimension = "requests", amount = 5, window = "1s" }`
	oneAMinute  = `{ dimension = "requests", amount = 1, window = "1m" }`
	oneSlot     = `{ dimension = "concurrency", amount = 1 }`
	aThousand   = `{ dimension = "tokens", amount = 1000, window = "1m" }`
)

func mustCode(t *testing.T, err error, code llmgov.Code) *llmgov.Error {
	t.Helper()
	var e *llmgov.Error
	if !errors.Is(err, code) || !errors.As(err, &e) {
		t.Fatalf("got %v, want %s", err, code.Name())
	}
	return e
}

func TestRedisTwoGovernorsShareOneLimitExactly(t *testing.T) {
	prefix := freshPrefix(t)
	a, routeA := redisGovernor(t, prefix, tenAMinute)
	b, routeB := redisGovernor(t, prefix, tenAMinute)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gov, route := a, routeA
			if i%2 == 1 {
				gov, route = b, routeB
			}
			for range 5 {
				p, err := gov.TryAcquire(llmgov.RedisRequest{Route: route, InputTokens: 10, MaxOutputTokens: 10})
				if err != nil {
					mustCode(t, err, llmgov.ErrRateLimited)
					continue
				}
				admitted.Add(1)
				if err := p.Settle(llmgov.Usage{InputTokens: 10, OutputTokens: 10}); err != nil {
					t.Error(err)
				}
				p.Close()
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 10 {
		t.Fatalf("admitted %d, want exactly 10", admitted.Load())
	}
	_, err := a.TryAcquire(llmgov.RedisRequest{Route: routeA})
	e := mustCode(t, err, llmgov.ErrRateLimited)
	if e.Scope != redisScope || e.Dimension != "requests" || !e.HasRetryAfter || e.RetryAfter <= time.Second {
		t.Fatalf("refusal %+v", e)
	}
	// One governor's route is not the other's.
	_, err = b.TryAcquire(llmgov.RedisRequest{Route: routeA})
	if e := mustCode(t, err, llmgov.ErrInvalidRequest); e.Field != "route" {
		t.Fatalf("field %q", e.Field)
	}
	health, err := a.Health()
	if err != nil || health.Degraded || health.RedisCalls == 0 || health.LastError != nil {
		t.Fatalf("health %+v, %v", health, err)
	}
}

func TestRedisSettleRefundsCancelFreesAndAPermitReconcilesOnce(t *testing.T) {
	gov, route := redisGovernor(t, freshPrefix(t), aThousand)
	_, err := gov.TryAcquire(llmgov.RedisRequest{Route: route, InputTokens: 100, MaxOutputTokens: 901})
	if e := mustCode(t, err, llmgov.ErrNeverFits); e.Cost != 1001 || e.Burst != 1000 {
		t.Fatalf("never fits %+v", e)
	}
	first, err := gov.TryAcquire(llmgov.RedisRequest{Route: route, InputTokens: 100, MaxOutputTokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	big := llmgov.RedisRequest{Route: route, InputTokens: 100, MaxOutputTokens: 800}
	_, err = gov.TryAcquire(big)
	mustCode(t, err, llmgov.ErrRateLimited)
	if err := first.Settle(llmgov.Usage{InputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	second, err := gov.TryAcquire(big) // the unused 500 came back
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	mustCode(t, first.Settle(llmgov.Usage{InputTokens: 100}), llmgov.ErrPermitFinished)
	mustCode(t, first.Cancel(), llmgov.ErrPermitFinished)
	e := mustCode(t, second.Settle(llmgov.Usage{InputTokens: 10, CachedInputTokens: 20}), llmgov.ErrInvalidRequest)
	if e.Field != "cached_input_tokens" || e.Value != "20" {
		t.Fatalf("bad usage %+v", e)
	}
	if err := second.Cancel(); err != nil { // still pending: cancelled
		t.Fatal(err)
	}
	if fallback, err := second.FromFallback(); err != nil || fallback {
		t.Fatalf("from fallback %v, %v", fallback, err)
	}
	third, err := gov.TryAcquire(big) // cancelled: its 900 came back
	if err != nil {
		t.Fatal(err)
	}
	gov.Close() // the permit keeps it alive
	if err := third.Settle(llmgov.Usage{InputTokens: 100, OutputTokens: 800}); err != nil {
		t.Fatal(err)
	}
	third.Close()
	if err := third.Cancel(); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("closed permit: %v", err)
	}
	if _, err := gov.TryAcquire(big); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("closed governor: %v", err)
	}
}

func TestRedisAcquireWaitsForADrainedBucket(t *testing.T) {
	gov, route := redisGovernor(t, freshPrefix(t), fiveASecond)
	r := llmgov.RedisRequest{Route: route, InputTokens: 10, MaxOutputTokens: 10}
	for range 5 {
		p, err := gov.TryAcquire(r)
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	started := time.Now()
	_, err := gov.TryAcquire(r)
	refusal := mustCode(t, err, llmgov.ErrRateLimited)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := gov.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Admitted once the refusal's retry_after (at most the 200 ms refill) has passed.
	waited := time.Since(started)
	if refusal.RetryAfter > 200*time.Millisecond || waited < refusal.RetryAfter {
		t.Fatalf("waited %v for a refill in %v", waited, refusal.RetryAfter)
	}
}

func TestRedisAPredictedWaitPastTheDeadlineIsRefusedAtOnce(t *testing.T) {
	gov, route := redisGovernor(t, freshPrefix(t), oneAMinute)
	r := llmgov.RedisRequest{Route: route}
	p, err := gov.TryAcquire(r)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	before, _ := gov.Health()
	_, err = gov.Acquire(ctx, r)
	e := mustCode(t, err, llmgov.ErrDeadlineExceeded)
	// Refused after one try, not at the timeout.
	after, _ := gov.Health()
	if calls := after.RedisCalls - before.RedisCalls; calls != 1 || !e.HasRetryAfter || e.RetryAfter < 50*time.Second {
		t.Fatalf("refused after %d Redis calls with %+v", calls, e)
	}
}

func TestRedisCancellingCtxStopsAWaitOnAHeldSlot(t *testing.T) {
	gov, route := redisGovernor(t, freshPrefix(t), oneSlot)
	r := llmgov.RedisRequest{Route: route}
	held, err := gov.TryAcquire(r)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	health, _ := gov.Health()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		p, err := gov.Acquire(ctx, r)
		if p != nil {
			p.Close()
		}
		done <- err
	}()
	for { // polling: refused at least twice
		now, _ := gov.Health()
		if now.RedisCalls >= health.RedisCalls+2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err = <-done:
	case <-time.After(time.Second):
		t.Fatal("the wait went on after its ctx was cancelled")
	}
	if !errors.Is(err, llmgov.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	// The waiter holds nothing: once the held slot is back, it is free.
	if err := held.Cancel(); err != nil {
		t.Fatal(err)
	}
	p, err := gov.TryAcquire(r)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

func TestRedisBadInputNamesTheField(t *testing.T) {
	redisURL(t)
	_, err := llmgov.NewRedisGovernorFromTOML(redisConfig("bad prefix!", tenAMinute))
	if e := mustCode(t, err, llmgov.ErrInvalidConfig); e.Field != "redis.prefix" || e.Value != "bad prefix!" {
		t.Fatalf("%+v", e)
	}
	_, err = llmgov.NewRedisGovernorFromJSON(`{"redis": {"prefix": "x", "expected_processes": "two"}}`)
	if e := mustCode(t, err, llmgov.ErrInvalidConfig); e.Field != "redis.expected_processes" || e.Value != "two" {
		t.Fatalf("%+v", e)
	}
	_, err = llmgov.NewRedisGovernorFromTOML("a = \x00")
	if e := mustCode(t, err, llmgov.ErrInvalidArg); e.Field != "toml" {
		t.Fatalf("%+v", e)
	}
	gov, route := redisGovernor(t, freshPrefix(t), tenAMinute)
	_, err = gov.Route(redisScope, "anthropic")
	if e := mustCode(t, err, llmgov.ErrUnknownScope); e.Scope != "anthropic" {
		t.Fatalf("%+v", e)
	}
	_, err = gov.TryAcquire(llmgov.RedisRequest{Route: route, MaxOutputTokens: 1<<40 + 1})
	if e := mustCode(t, err, llmgov.ErrInvalidRequest); e.Field != "max_output_tokens" {
		t.Fatalf("%+v", e)
	}
	_, err = gov.Acquire(context.Background(), llmgov.RedisRequest{Route: 0})
	if e := mustCode(t, err, llmgov.ErrInvalidRequest); e.Field != "route" || e.Value != "0" {
		t.Fatalf("%+v", e)
	}
	var none *llmgov.RedisGovernor
	if _, err := none.Route(redisScope); !errors.Is(err, llmgov.ErrNullArgument) {
		t.Fatalf("nil governor: %v", err)
	}
	var zero llmgov.RedisPermit
	if err := zero.Settle(llmgov.Usage{}); !errors.Is(err, llmgov.ErrNullArgument) {
		t.Fatalf("zero permit: %v", err)
	}
}

// A governor nothing refers to after Acquire is called is still alive
// until Acquire returns: its cleanup must not free it during the wait.
func TestRedisAGovernorIsNotCollectedDuringItsOwnWait(t *testing.T) {
	redisURL(t)
	prefix := freshPrefix(t)
	drainer, route := redisGovernor(t, prefix, fiveASecond)
	for range 5 {
		p, err := drainer.TryAcquire(llmgov.RedisRequest{Route: route})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	collect := make(chan struct{})
	go func() {
		for {
			select {
			case <-collect:
				return
			default:
				runtime.GC()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	defer close(collect)
	permit, err := waitOnAFreshGovernor(prefix)
	if err != nil {
		t.Fatal(err)
	}
	permit.Close()
}

// waitOnAFreshGovernor makes a governor that only Acquire refers to.
func waitOnAFreshGovernor(prefix string) (*llmgov.RedisPermit, error) {
	gov, err := llmgov.NewRedisGovernorFromTOML(redisConfig(prefix, fiveASecond))
	if err != nil {
		return nil, err
	}
	route, err := gov.Route(redisScope)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return gov.Acquire(ctx, llmgov.RedisRequest{Route: route})
}

func TestRedisSnapshotAndMetricsAreTheLocalScopes(t *testing.T) {
	redisURL(t)
	config := redisConfig(freshPrefix(t), tenAMinute) + `
[scopes."tenants/*"]
limits = [{ dimension = "requests", amount = 1, window = "1m" }]
`
	gov, err := llmgov.NewRedisGovernorFromTOML(config)
	if err != nil {
		t.Fatal(err)
	}
	defer gov.Close()
	route, err := gov.Route("tenants/acme", redisScope)
	if err != nil {
		t.Fatal(err)
	}
	p, err := gov.TryAcquire(llmgov.RedisRequest{Route: route})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = gov.TryAcquire(llmgov.RedisRequest{Route: route})
	if e := mustCode(t, err, llmgov.ErrRateLimited); e.Scope != "tenants/acme" {
		t.Fatalf("refused by %q", e.Scope)
	}
	snapshot, err := gov.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snapshot.Scopes) != 1 || snapshot.Scopes[0].Path != "tenants/acme" || snapshot.RateLimited != 1 {
		t.Fatalf("snapshot %+v", snapshot)
	}
	metrics, err := gov.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if refused, ok := metrics.Refused("requests", llmgov.RejectedLocally); !ok || refused != 1 {
		t.Fatalf("refusals %+v", metrics.Refusals)
	}
}

// A 429 reported on one governor's permit holds a shared provider scope
// in Redis for another governor on the same prefix (another process), for
// the whole retry-after.
func TestRedisReportHoldsASharedProviderScopeForEveryGovernor(t *testing.T) {
	redisURL(t)
	config := fmt.Sprintf(`
[scopes."openai/key"]
provider = true
limits = [{ dimension = "requests", amount = 1000, window = "1m" }]
[redis]
prefix = %q
expected_processes = 2
timeout = "2s"
[redis.scopes."openai/key"]
mode = "exact"
`, freshPrefix(t))
	governors := make([]*llmgov.RedisGovernor, 2)
	for i := range governors {
		gov, err := llmgov.NewRedisGovernorFromTOML(config)
		if err != nil {
			t.Fatal(err)
		}
		defer gov.Close()
		governors[i] = gov
	}
	request := func(gov *llmgov.RedisGovernor) llmgov.RedisRequest {
		return llmgov.RedisRequest{Route: must[llmgov.RedisRoute](t)(gov.Route("openai/key")), InputTokens: 10}
	}
	permit := must[*llmgov.RedisPermit](t)(governors[0].TryAcquire(request(governors[0])))
	defer permit.Close()
	if c := must[llmgov.Classification](t)(permit.Report(429, http.Header{"Retry-After": {"30"}}, nil)); c.Kind != "rate_limited" {
		t.Fatalf("classification %+v", c)
	}
	if err := permit.Cancel(); err != nil {
		t.Fatal(err)
	}
	for i, gov := range []*llmgov.RedisGovernor{governors[1], governors[0]} {
		p, err := gov.TryAcquire(request(gov))
		if p != nil {
			p.Close()
		}
		e := mustCode(t, err, llmgov.ErrRateLimited)
		if e.Scope != "openai/key" || !e.HasRetryAfter || e.RetryAfter < 29*time.Second {
			t.Fatalf("governor %d: refusal %+v, want the shared provider scope held for the retry-after", i, e)
		}
	}
}

// Report feeds a provider's answer into the local scopes of the permit's
// route (on the manual clock): a 429's retry-after holds the local provider
// scope. On a route of shared scopes alone it only classifies. As
// test_redis.c's report_holds_the_local_provider_scope.
func TestRedisReportHoldsTheLocalProviderScope(t *testing.T) {
	redisURL(t)
	config := fmt.Sprintf(`
[scopes."openai/org"]
provider = true
limits = [{ dimension = "requests", amount = 1000, window = "1m" }]
[scopes."team"]
limits = [{ dimension = "tokens", amount = 100000, window = "1m" }]
[redis]
prefix = %q
expected_processes = 2
timeout = "2s"
[redis.scopes."team"]
mode = "exact"
`, freshPrefix(t))
	clock := llmgov.NewManualClock(0)
	defer clock.Close()
	gov, err := llmgov.NewRedisGovernorFromTOML(config, llmgov.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer gov.Close()
	route := must[llmgov.RedisRoute](t)(gov.Route("team", "openai/org"))
	sharedOnly := must[llmgov.RedisRoute](t)(gov.Route("team"))
	r := llmgov.RedisRequest{Route: route, InputTokens: 10, MaxOutputTokens: 10}
	retry := http.Header{"Retry-After": {"30"}}

	permit := must[*llmgov.RedisPermit](t)(gov.TryAcquire(r))
	c := must[llmgov.Classification](t)(permit.Report(429, retry, nil))
	if !c.Limited || !c.Retryable || c.Kind != "rate_limited" || !c.HasRetryAfter || c.RetryAfter != 30*time.Second {
		t.Fatalf("classification %+v", c)
	}
	if err := permit.Cancel(); err != nil {
		t.Fatal(err)
	}
	permit.Close()

	// The local provider scope holds the next request for the retry-after,
	// on the manual clock.
	refused := func(when string) {
		t.Helper()
		p, err := gov.TryAcquire(r)
		if p != nil {
			p.Close()
		}
		if e := mustCode(t, err, llmgov.ErrRateLimited); e.Scope != "openai/org" {
			t.Fatalf("%s: refused by %q, want the local provider scope: %+v", when, e.Scope, e)
		}
	}
	refused("at once")
	_, err = gov.TryAcquire(r)
	if e := mustCode(t, err, llmgov.ErrRateLimited); !e.HasRetryAfter || e.RetryAfter < 29*time.Second {
		t.Fatalf("refusal %+v", e)
	}
	if s := must[*llmgov.Snapshot](t)(gov.Snapshot()); s.AdmittedThenProviderRejected != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	if err := clock.Advance(29 * time.Second); err != nil {
		t.Fatal(err)
	}
	refused("29 s later")
	// The hold is the retry-after and a little more (AIMD slowed the rate).
	if err := clock.Advance(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	permit = must[*llmgov.RedisPermit](t)(gov.TryAcquire(r))
	// A success is classified too, and holds nothing.
	c = must[llmgov.Classification](t)(permit.Report(200, nil, nil))
	if c.Limited || c.Kind != "none" {
		t.Fatalf("classification of a 200 %+v", c)
	}
	if err := permit.Settle(llmgov.Usage{InputTokens: 10, OutputTokens: 5}); err != nil {
		t.Fatal(err)
	}
	permit.Close()

	// Shared scopes alone: the answer is classified, nothing is fed back,
	// and no error. Reporting after the settle is allowed.
	permit = must[*llmgov.RedisPermit](t)(gov.TryAcquire(llmgov.RedisRequest{Route: sharedOnly, InputTokens: 10, MaxOutputTokens: 10}))
	defer permit.Close()
	if err := permit.Settle(llmgov.Usage{InputTokens: 10, OutputTokens: 5}); err != nil {
		t.Fatal(err)
	}
	c = must[llmgov.Classification](t)(permit.Report(429, retry, nil))
	if !c.Limited || c.Kind != "rate_limited" || !c.HasRetryAfter || c.RetryAfter != 30*time.Second {
		t.Fatalf("classification on the shared-only route %+v", c)
	}
	// The local provider scope learnt nothing from it.
	held := must[*llmgov.RedisPermit](t)(gov.TryAcquire(r))
	if err := held.Cancel(); err != nil {
		t.Fatal(err)
	}
	held.Close()
	if s := must[*llmgov.Snapshot](t)(gov.Snapshot()); s.AdmittedThenProviderRejected != 1 {
		t.Fatalf("the shared-only report was fed back: %+v", s)
	}

	// A status that is none is refused, naming it; nothing is fed back.
	for _, status := range []int{42, 99, 1000} {
		_, err := permit.Report(status, retry, nil)
		wantArgError(t, "Report", err, llmgov.ErrInvalidRequest, "status", strconv.Itoa(status))
	}
	held = must[*llmgov.RedisPermit](t)(gov.TryAcquire(r))
	_, err = held.Report(1000, retry, nil)
	wantArgError(t, "Report on the provider's route", err, llmgov.ErrInvalidRequest, "status", "1000")
	if err := held.Cancel(); err != nil {
		t.Fatal(err)
	}
	held.Close()
	permit = must[*llmgov.RedisPermit](t)(gov.TryAcquire(r))
	permit.Cancel()
	permit.Close()
	_, err = permit.Report(429, retry, nil)
	wantArgError(t, "Report on a closed permit", err, llmgov.ErrInvalidArg, "permit", "closed")
	if !errors.Is(err, llmgov.ErrClosed) {
		t.Errorf("closed permit: %v", err)
	}
}

// A nil or zero RedisPermit is an error naming it, Report included, as
// the other handles' (no Redis needed).
func TestRedisNilAndZeroPermitsAreErrorsNamingThem(t *testing.T) {
	for name, p := range map[string]*llmgov.RedisPermit{"nil": nil, "zero": {}} {
		_, err := p.Report(429, http.Header{"Retry-After": {"30"}}, nil)
		wantArgError(t, name+" RedisPermit.Report", err, llmgov.ErrNullArgument, "permit", "")
		wantArgError(t, name+" RedisPermit.Settle", p.Settle(llmgov.Usage{}), llmgov.ErrNullArgument, "permit", "")
		wantArgError(t, name+" RedisPermit.Cancel", p.Cancel(), llmgov.ErrNullArgument, "permit", "")
		_, err = p.FromFallback()
		wantArgError(t, name+" RedisPermit.FromFallback", err, llmgov.ErrNullArgument, "permit", "")
		// A bad status is named first, as Permit.Report does.
		_, err = p.Report(42, nil, nil)
		wantArgError(t, name+" RedisPermit.Report(42)", err, llmgov.ErrInvalidRequest, "status", "42")
		p.Close()
	}
}

func TestRedisAddOutputChargesTheLocalScopesWithNoRedisCall(t *testing.T) {
	redisURL(t)
	gov, err := llmgov.NewRedisGovernorFromTOML(fmt.Sprintf(`
[scopes."team"]
limits = [{ dimension = "tokens", amount = 100000, window = "1m" }]
[scopes."openai/key"]
limits = [{ dimension = "output_tokens", amount = 100, window = "1m" }]
[redis]
prefix = %q
expected_processes = 2
timeout = "2s"
[redis.scopes."team"]
mode = "exact"
`, freshPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer gov.Close()
	route, err := gov.Route("team", "openai/key")
	if err != nil {
		t.Fatal(err)
	}
	request := llmgov.RedisRequest{Route: route, InputTokens: 10, MaxOutputTokens: 40}
	streaming, err := gov.TryAcquire(request)
	if err != nil {
		t.Fatal(err)
	}
	defer streaming.Close()
	before, _ := gov.Health()
	// 70 streamed: 30 past the reservation, charged on the local scope at once.
	for _, tokens := range []uint64{30, 40} {
		if err := streaming.AddOutput(tokens); err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := gov.Health(); after.RedisCalls != before.RedisCalls {
		t.Fatalf("%d Redis calls for add_output", after.RedisCalls-before.RedisCalls)
	}
	_, err = gov.TryAcquire(request)
	if e := mustCode(t, err, llmgov.ErrRateLimited); e.Scope != "openai/key" {
		t.Fatalf("refused by %q", e.Scope)
	}
	e := mustCode(t, streaming.AddOutput(1<<41), llmgov.ErrInvalidRequest)
	if e.Field != "tokens" {
		t.Fatalf("bad count %+v", e)
	}
	if err := streaming.Settle(llmgov.Usage{InputTokens: 10, OutputTokens: 70}); err != nil {
		t.Fatal(err)
	}
	mustCode(t, streaming.AddOutput(1), llmgov.ErrPermitFinished)
}
