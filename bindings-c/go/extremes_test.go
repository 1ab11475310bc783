package llmgov_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// The end of time.Duration: what a wait too long for it reads as.
const forever = time.Duration(math.MaxInt64)

var classifyNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// An empty header value (or name) crosses as NULL with length 0, wherever
// it falls among the headers (map order varies, so each shape runs often
// enough to put the empty one last).
func TestEmptyHeaderNamesAndValuesAreRead(t *testing.T) {
	headers := []http.Header{
		{"Retry-After": {""}},
		{"": {""}},
		{"": {"x"}},
		{"Retry-After": {""}, "X-Ratelimit-Remaining-Tokens": {"5"}, "X-Empty": {"", ""}, "": {""}},
	}
	for i := range 40 {
		for _, header := range headers {
			if i == 0 { // a governor each, as a 429 holds the provider's scope
				gov, _ := newGovernor(t)
				route := must[llmgov.Route](t)(gov.Route("tenants/a", "openai/org/gpt-4o"))
				permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1}))
				c := must[llmgov.Classification](t)(permit.Report(429, header, nil))
				if c.HasRetryAfter {
					t.Fatalf("Report %v: %+v", header, c)
				}
				if err := permit.Cancel(); err != nil {
					t.Fatal(err)
				}
			}
			c := must[llmgov.Classification](t)(llmgov.ClassifyResponse(429, header, nil, llmgov.ProviderOpenAI, classifyNow))
			if c.HasRetryAfter || !c.Limited {
				t.Fatalf("ClassifyResponse %v: %+v", header, c)
			}
			if _, ok := header["X-Ratelimit-Remaining-Tokens"]; ok && c.Remaining["tokens"] != 5 {
				t.Fatalf("the other headers were not read: %v: %+v", header, c)
			}
			text := must[[]byte](t)(llmgov.ClassifyResponseJSON(429, header, []byte{}, llmgov.ProviderOpenAI, classifyNow))
			if !strings.Contains(string(text), `"retry_after_ms":null`) {
				t.Fatalf("ClassifyResponseJSON %v: %s", header, text)
			}
		}
	}
}

// A wait longer than time.Duration holds (about 292 years) reads as the
// longest one, never as a negative or wrapped one.
func TestHugeRetryAftersSaturateAtTheLongestDuration(t *testing.T) {
	for _, header := range []http.Header{
		{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}},
		{"Retry-After-Ms": {"99999999999999999999"}},
	} {
		c := must[llmgov.Classification](t)(llmgov.ClassifyResponse(429, header, nil, llmgov.ProviderAuto, classifyNow))
		if !c.HasRetryAfter || c.RetryAfter != forever {
			t.Errorf("ClassifyResponse %v: RetryAfter %v (has %v), want %v", header, c.RetryAfter, c.HasRetryAfter, forever)
		}
	}

	// The same, fed back: the classification and the provider_rejected
	// event (its retry_after_ms is u64::MAX).
	gov, _, log := loggedGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1}))
	c := must[llmgov.Classification](t)(permit.Report(429, http.Header{"Retry-After-Ms": {"99999999999999999999"}}, nil))
	if c.RetryAfter != forever {
		t.Errorf("Report: RetryAfter %v, want %v", c.RetryAfter, forever)
	}
	events := log.all()
	if len(events) == 0 || events[0].Kind != "provider_rejected" || !events[0].HasRetryAfter || events[0].RetryAfter != forever {
		t.Errorf("want a provider_rejected event retrying after %v, got %+v", forever, events)
	}
}

func TestNewManualClockClampsANegativeStartAsSetDoes(t *testing.T) {
	clock := llmgov.NewManualClock(-1)
	defer clock.Close()
	if now := must[time.Duration](t)(clock.Now()); now != 0 {
		t.Fatalf("NewManualClock(-1) reads %v, want 0", now)
	}
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(config, llmgov.WithClock(clock)))
	defer gov.Close()
	route := must[llmgov.Route](t)(gov.Route("tenants/a"))
	must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1})).Cancel()
	if err := clock.Advance(time.Minute); err != nil {
		t.Fatal(err)
	}
	if now := must[time.Duration](t)(clock.Now()); now != time.Minute {
		t.Fatalf("after Advance(1m) the clock reads %v", now)
	}
}

// A manual clock goes as far as 2^63 ns (one past time.Duration's end, so
// it reads as the longest Duration) and no further: a step past it is
// refused naming the step, and governors on it keep admitting.
func TestAManualClockStopsAt2To63Nanoseconds(t *testing.T) {
	clock := llmgov.NewManualClock(forever - time.Second)
	defer clock.Close()
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(config, llmgov.WithClock(clock)))
	defer gov.Close()
	route := must[llmgov.Route](t)(gov.Route("tenants/a"))
	if err := clock.Advance(time.Second + 1); err != nil { // to 2^63 exactly
		t.Fatal(err)
	}
	if now := must[time.Duration](t)(clock.Now()); now != forever {
		t.Fatalf("at 2^63 ns the clock reads %v, want %v", now, forever)
	}
	err := clock.Advance(1)
	wantArgError(t, "Advance past 2^63 ns", err, llmgov.ErrInvalidArg, "ns", "1")
	if err != nil && !strings.Contains(err.Error(), "past 2^63 ns") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if now := must[time.Duration](t)(gov.Now()); now != forever {
		t.Fatalf("a refused step moved the clock: %v", now)
	}
	permit, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 1})
	if err != nil {
		t.Fatalf("a governor at the clock's end refuses: %v", err)
	}
	if err := permit.Settle(llmgov.Usage{InputTokens: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestANilCtxIsAnErrorNamingIt(t *testing.T) {
	gov, profile := routingGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	//lint:ignore SA1012 the nil ctx is the point
	_, err := gov.Acquire(nil, llmgov.Request{Route: route, InputTokens: 1}) //nolint:staticcheck
	wantArgError(t, "Governor.Acquire(nil)", err, llmgov.ErrNullArgument, "ctx", "")
	//lint:ignore SA1012 the nil ctx is the point
	_, err = gov.AcquireProfile(nil, profile, llmgov.Request{InputTokens: 1}) //nolint:staticcheck
	wantArgError(t, "Governor.AcquireProfile(nil)", err, llmgov.ErrNullArgument, "ctx", "")
	if reserved := reservedOn(t, gov); reserved != 0 {
		t.Fatalf("a refused nil ctx reserved %d", reserved)
	}
	// Nothing was admitted either: a real ctx still gets the whole limit.
	must[*llmgov.Permit](t)(gov.Acquire(context.Background(), llmgov.Request{Route: route, InputTokens: 1})).Cancel()
}

func TestRedisANilCtxIsAnErrorNamingIt(t *testing.T) {
	gov, route := redisGovernor(t, freshPrefix(t), oneAMinute)
	//lint:ignore SA1012 the nil ctx is the point
	_, err := gov.Acquire(nil, llmgov.RedisRequest{Route: route}) //nolint:staticcheck
	wantArgError(t, "RedisGovernor.Acquire(nil)", err, llmgov.ErrNullArgument, "ctx", "")
	// The one request a minute is still there.
	permit, err := gov.TryAcquire(llmgov.RedisRequest{Route: route})
	if err != nil {
		t.Fatalf("a nil ctx took the minute's request: %v", err)
	}
	if err := permit.Cancel(); err != nil {
		t.Fatal(err)
	}
}
