package llmgov_test

import (
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// One token every 60 ms for each tenant; the provider scope takes feedback.
const config = `
permit_ttl = "16s"
[scopes."openai/org/gpt-4o"]
provider = true
limits = [{ dimension = "tokens", amount = 6000, window = "1m" }]
[scopes."tenants/*"]
limits = [
  { dimension = "tokens", amount = 1000, window = "1m" },
  { dimension = "concurrency", amount = 2 },
]
`

func newGovernor(t *testing.T) (*llmgov.Governor, *llmgov.ManualClock) {
	t.Helper()
	clock := llmgov.NewManualClock(0)
	gov, err := llmgov.FromTOML(config, llmgov.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gov.Close(); clock.Close() })
	return gov, clock
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestRefusalsWrapTheirCodes(t *testing.T) {
	gov, clock := newGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("tenants/acme", "openai/org/gpt-4o"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 500, MaxOutputTokens: 300}))

	_, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 500})
	if !errors.Is(err, llmgov.ErrRateLimited) || errors.Is(err, llmgov.ErrNeverFits) {
		t.Fatalf("want rate_limited, got %v", err)
	}
	var e *llmgov.Error
	if !errors.As(err, &e) {
		t.Fatalf("not an *llmgov.Error: %T", err)
	}
	if e.Scope != "tenants/acme" || e.Dimension != "tokens" || !e.HasRetryAfter || e.RetryAfter != 18*time.Second {
		t.Errorf("wrong details: %+v", e)
	}
	if e.CodeName != "rate_limited" || !strings.Contains(e.Error(), "tenants/acme") {
		t.Errorf("wrong text: %q %q", e.CodeName, e.Error())
	}

	// Settling low refunds: 6 s early now, then admitted after 6 s.
	if err := permit.Settle(llmgov.Usage{InputTokens: 500, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	_, err = gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 500})
	if !errors.As(err, &e) || e.RetryAfterMillis() != 6000 {
		t.Errorf("want a retry after 6000 ms, got %v", err)
	}
	if err := clock.Advance(6 * time.Second); err != nil {
		t.Fatal(err)
	}
	second := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 500}))
	if err := second.Cancel(); err != nil {
		t.Fatal(err)
	}

	// Reconciling twice is permit_finished, with the core's message.
	err = permit.Settle(llmgov.Usage{})
	if !errors.Is(err, llmgov.ErrPermitFinished) || err.Error() != "llmgov: permit already settled" {
		t.Errorf("second settle: %v", err)
	}
	if state := must[llmgov.PermitState](t)(permit.State()); state != llmgov.Settled {
		t.Errorf("state %v", state)
	}

	_, err = gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 5000})
	if !errors.Is(err, llmgov.ErrNeverFits) || !errors.As(err, &e) || e.Cost != 5000 || e.Burst != 1000 {
		t.Errorf("never fits: %v %+v", err, e)
	}
}

func TestBadInputNamesFieldAndValue(t *testing.T) {
	_, err := llmgov.FromTOML(`[scopes."x"]
limits = [{ dimension = "tokens", amount = 0, window = "1m" }]`)
	var e *llmgov.Error
	if !errors.Is(err, llmgov.ErrInvalidConfig) || !errors.As(err, &e) ||
		!strings.HasSuffix(e.Field, "limits[0].amount") || e.Value != "0" {
		t.Errorf("bad config: %v", err)
	}
	_, err = llmgov.FromPreset("nope")
	if !errors.Is(err, llmgov.ErrUnknownPreset) || !strings.Contains(err.Error(), "openai-gpt-4o-tier1") {
		t.Errorf("unknown preset: %v", err)
	}
	gov, _ := newGovernor(t)
	_, err = gov.Route("tenants/\xff")
	if !errors.Is(err, llmgov.ErrInvalidUTF8) || !errors.As(err, &e) || e.Field != "paths[0]" {
		t.Errorf("invalid UTF-8 path: %v", err)
	}
	if _, err := gov.Route("nobody"); !errors.Is(err, llmgov.ErrUnknownScope) {
		t.Errorf("unknown scope: %v", err)
	}
	if _, err := gov.Route(); !errors.Is(err, llmgov.ErrInvalidRequest) {
		t.Errorf("no paths: %v", err)
	}
	if _, err := gov.TryAcquire(llmgov.Request{Route: 999}); !errors.Is(err, llmgov.ErrInvalidRequest) {
		t.Errorf("route from nowhere: %v", err)
	}
	route := must[llmgov.Route](t)(gov.Route("tenants/a"))
	_, err = gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1 << 62})
	if !errors.Is(err, llmgov.ErrInvalidRequest) || !errors.As(err, &e) || e.Field != "input_tokens" {
		t.Errorf("huge tokens: %v", err)
	}
	if _, err := llmgov.CountTokens(llmgov.Encoding(9), "x"); !errors.Is(err, llmgov.ErrInvalidArg) {
		t.Errorf("bad encoding: %v", err)
	}
	if _, err := llmgov.ClassifyResponse(70000, nil, nil, llmgov.ProviderAuto, time.Now()); !errors.Is(err, llmgov.ErrInvalidRequest) {
		t.Errorf("bad status: %v", err)
	}
}

func TestClosedHandlesSayClosed(t *testing.T) {
	gov, clock := newGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("tenants/a"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route}))
	gov.Close()
	gov.Close()
	if _, err := gov.TryAcquire(llmgov.Request{Route: route}); !errors.Is(err, llmgov.ErrClosed) {
		t.Errorf("closed governor: %v", err)
	}
	// The permit keeps the library's governor alive: it still settles.
	if err := permit.Settle(llmgov.Usage{}); err != nil {
		t.Errorf("settle after the governor closed: %v", err)
	}
	permit.Close()
	permit.Close()
	if err := permit.Cancel(); !errors.Is(err, llmgov.ErrClosed) {
		t.Errorf("closed permit: %v", err)
	}
	clock.Close()
	if err := clock.Advance(time.Second); !errors.Is(err, llmgov.ErrClosed) {
		t.Errorf("closed clock: %v", err)
	}
}

func TestReportFeedsTheProviderBack(t *testing.T) {
	gov, _ := newGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("tenants/a", "openai/org/gpt-4o"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 10}))
	header := http.Header{"Retry-After": {"20"}, "X-Ratelimit-Remaining-Tokens": {"0"}}
	body := []byte(`{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}`)
	c := must[llmgov.Classification](t)(permit.Report(429, header, body))
	if !c.Limited || c.Kind != "rate_limited" || c.Dimension != "tokens" || c.RetryAfter != 20*time.Second ||
		c.Provider != llmgov.ProviderOpenAI || c.Remaining["tokens"] != 0 || len(c.Remaining) != 1 {
		t.Errorf("classification %+v", c)
	}
	if err := permit.Cancel(); err != nil {
		t.Fatal(err)
	}
	other := must[llmgov.Route](t)(gov.Route("tenants/b", "openai/org/gpt-4o"))
	_, err := gov.TryAcquire(llmgov.Request{Route: other, InputTokens: 10})
	var e *llmgov.Error
	if !errors.As(err, &e) || e.Scope != "openai/org/gpt-4o" {
		t.Errorf("the provider's bucket is not held: %v", err)
	}
	s := must[*llmgov.Snapshot](t)(gov.Snapshot())
	if s.AdmittedThenProviderRejected != 1 || s.Admitted != 1 || s.RateLimited != 1 {
		t.Errorf("snapshot %+v", s)
	}
}

func TestClassifyAndCount(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	header := http.Header{"Anthropic-Ratelimit-Output-Tokens-Remaining": {"7000"}}
	c := must[llmgov.Classification](t)(llmgov.ClassifyResponse(529, header, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), llmgov.ProviderAuto, now))
	if c.Kind != "overloaded" || c.Provider != llmgov.ProviderAnthropic || c.Remaining["output_tokens"] != 7000 {
		t.Errorf("classification %+v", c)
	}
	text := must[[]byte](t)(llmgov.ClassifyResponseJSON(429, nil, nil, llmgov.ProviderOpenAI, now))
	if !strings.Contains(string(text), `"limited":true`) {
		t.Errorf("json %s", text)
	}
	if n := must[uint64](t)(llmgov.CountTokens(llmgov.O200k, "tiktoken is great!")); n != 6 {
		t.Errorf("o200k count %d", n)
	}
	if n := must[uint64](t)(llmgov.CountTokensForModel("gpt-4", "hello world")); n != 2 {
		t.Errorf("cl100k count %d", n)
	}
	if n := must[uint64](t)(llmgov.EstimateTokens(strings.Repeat("word ", 1000))); n < 500 || n > 2000 {
		t.Errorf("estimate %d", n)
	}
}

func TestConcurrentGoroutinesNeverOverAdmit(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(`[scopes.shared]
limits = [{ dimension = "requests", amount = 1000, window = "1h" }]`, llmgov.WithClock(clock)))
	route := must[llmgov.Route](t)(gov.Route("shared"))
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		admitted, denied int
		wrong            []error
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				p, err := gov.TryAcquire(llmgov.Request{Route: route})
				var e *llmgov.Error
				mu.Lock()
				switch {
				case err == nil:
					admitted++
					p.Close()
				case errors.As(err, &e) && e.Scope == "shared" && e.HasRetryAfter:
					denied++
				default:
					wrong = append(wrong, err)
				}
				mu.Unlock()
				runtime.Gosched() // let goroutines move between threads
			}
		}()
	}
	wg.Wait()
	if admitted != 1000 || denied != 3000 || len(wrong) != 0 {
		t.Errorf("admitted %d, denied %d, wrong %v", admitted, denied, wrong)
	}
}
