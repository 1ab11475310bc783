package llmgov_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// value is the sample of the series named exactly series in text.
func value(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in\n%s", series, text)
	return 0
}

func TestPrometheusText(t *testing.T) {
	gov, _ := newGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("tenants/acme", "openai/org/gpt-4o"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}))
	defer permit.Close()
	if _, err := gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 600}); !errors.Is(err, llmgov.ErrRateLimited) {
		t.Fatalf("want rate_limited, got %v", err)
	}
	text := must[string](t)(gov.Prometheus())
	for _, line := range []string{
		`llmgov_limit{scope="tenants/acme",dimension="tokens",window_ms="60000"} 1000`,
		`llmgov_in_use{scope="tenants/acme",dimension="tokens",window_ms="60000"} 600`,
		`llmgov_in_use{scope="openai/org/gpt-4o",dimension="tokens",window_ms="60000"} 600`,
		`llmgov_utilisation{scope="tenants/acme",dimension="concurrency",window_ms="none"} 0.5`,
		`llmgov_breaker{scope="openai/org/gpt-4o",state="closed"} 1`,
		"llmgov_admitted_total 1",
		"llmgov_rate_limited_total 1",
		"# TYPE llmgov_limit gauge",
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no %q in\n%s", line, text)
		}
	}
	if !strings.HasSuffix(text, "# EOF\n") {
		t.Errorf("not OpenMetrics-terminated:\n%s", text)
	}
	gov.Close()
	if _, err := gov.Prometheus(); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
	if _, err := gov.MetricsJSON(); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}

// aimdGovernor is a provider that answered one of two admitted requests
// with a 429 on tokens (AIMD at 0.75), a tenant refused once on its
// concurrency, and one exact estimate, 2 s later: as
// core/tests/prometheus.rs.
func aimdGovernor(t *testing.T) *llmgov.Governor {
	t.Helper()
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromJSON(`{"adaptive": {"decrease": 0.75}, "scopes": {
		"openai/org": {"provider": true, "limits": [
			{"dimension": "requests", "amount": 500, "window": "1m"},
			{"dimension": "tokens", "amount": 30000, "window": "1m"},
			{"dimension": "tokens", "amount": 1000000, "window": "1d"}]},
		"tenants/*": {"limits": [{"dimension": "concurrency", "amount": 2}]}}}`, llmgov.WithClock(clock)))
	t.Cleanup(func() { gov.Close(); clock.Close() })
	route := must[llmgov.Route](t)(gov.Route("tenants/acme", "openai/org"))
	sent := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 6000}))
	held := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 100}))
	t.Cleanup(held.Close)
	if _, err := gov.TryAcquire(llmgov.Request{Route: route}); !errors.Is(err, llmgov.ErrRateLimited) {
		t.Fatalf("two in flight at most: %v", err)
	}
	body := []byte(`{"error":{"type":"tokens","code":"rate_limit_exceeded"}}`)
	must[llmgov.Classification](t)(sent.Report(429, http.Header{"Retry-After": {"2"}}, body))
	if err := sent.Settle(llmgov.Usage{InputTokens: 6000}); err != nil {
		t.Fatal(err)
	}
	if err := clock.Advance(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	return gov
}

func TestPrometheusAIMDRefusalsEstimatesAndAmplification(t *testing.T) {
	gov := aimdGovernor(t)
	text := must[string](t)(gov.Prometheus())
	tokens := `{scope="openai/org",dimension="tokens",window_ms="60000"}`
	daily := `{scope="openai/org",dimension="tokens",window_ms="86400000"}`
	slots := `{scope="tenants/acme",dimension="concurrency",window_ms="none"}`
	for series, want := range map[string]float64{
		"llmgov_limit" + tokens:           30000,
		"llmgov_limit_effective" + tokens: 22500, // AIMD took it to 0.75
		"llmgov_in_use" + daily:           6077,  // 6100 less 2 s of 1M a day
		"llmgov_reserved" + daily:         100,   // the permit still held
		"llmgov_used" + daily:             5977,
		"llmgov_reserved" + slots:         1,
		`llmgov_refusals_total{dimension="concurrency",gateway_decision="rejected_locally"}`:             1,
		`llmgov_refusals_total{dimension="tokens",gateway_decision="admitted_then_provider_rejected"}`:   1,
		`llmgov_refusals_total{dimension="requests",gateway_decision="rejected_locally"}`:                0,
		`llmgov_refusals_total{dimension="requests",gateway_decision="admitted_then_provider_rejected"}`: 0,
		"llmgov_provider_rejected_total": 1,
		// One of two admitted was refused by the provider: two sent per success.
		"llmgov_retry_amplification": 2,
		// The estimate was exact.
		`llmgov_estimate_error{route="openai/org",side="input",quantile="0.5"}`: 0,
		`llmgov_estimate_samples_total{route="openai/org",side="input"}`:        1,
	} {
		if got := value(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// The same figures through the metrics JSON.
	m := must[*llmgov.Metrics](t)(gov.Metrics())
	limits := m.Snapshot.Scopes[0].Limits
	if m.Snapshot.Scopes[0].Path != "openai/org" || limits[1].Amount != 30000 || *limits[1].EffectiveAmount != 22500 {
		t.Errorf("tokens limit %+v", limits[1])
	}
	if limits[2].InUse != 6077 || limits[2].Reserved != 100 || limits[2].Used != 5977 {
		t.Errorf("daily limit %+v", limits[2])
	}
	for _, c := range []struct {
		dimension, decision string
		want                uint64
	}{
		{"concurrency", llmgov.RejectedLocally, 1},
		{"tokens", llmgov.AdmittedThenProviderRejected, 1},
		{"requests", llmgov.RejectedLocally, 0},
	} {
		if got, ok := m.Refused(c.dimension, c.decision); !ok || got != c.want {
			t.Errorf("refusals of %s %s = %d (listed %v), want %d", c.dimension, c.decision, got, ok, c.want)
		}
	}
	if m.RetryAmplification != 2 || m.Snapshot.Admitted != 2 || m.Snapshot.AdmittedThenProviderRejected != 1 {
		t.Errorf("amplification %v, snapshot %+v", m.RetryAmplification, m.Snapshot)
	}
	i := slices.IndexFunc(m.EstimateErrors, func(e llmgov.EstimateError) bool { return e.Side == "input" })
	if i < 0 || !slices.Equal(m.EstimateErrors[i].Scopes, []string{"openai/org"}) ||
		m.EstimateErrors[i].Samples != 1 || m.EstimateErrors[i].P50 != 0 {
		t.Errorf("estimate errors %+v", m.EstimateErrors)
	}
	if m.Queues.Depth != 0 || len(m.Queues.Classes) != 0 {
		t.Errorf("queues %+v", m.Queues)
	}
}

// One request a minute: a permit held past its TTL expires, and a waiter
// queues behind it, seen while it waits and after it passes.
func TestPrometheusQueueDepthOldestWaiterAndExpiries(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(`permit_ttl = "1m"
[scopes.p]
limits = [{ dimension = "requests", amount = 1, window = "1m" }]`, llmgov.WithClock(clock)))
	t.Cleanup(func() { gov.Close(); clock.Close() })
	request := llmgov.Request{Route: must[llmgov.Route](t)(gov.Route("p"))}
	forgotten := must[*llmgov.Permit](t)(gov.TryAcquire(request))
	defer forgotten.Close()
	admitted := make(chan error, 1)
	go func() {
		permit, err := gov.Acquire(context.Background(), request)
		if err == nil {
			permit.Close()
		}
		admitted <- err
	}()
	untilWaiting(t, gov, 1)
	if err := clock.Advance(1500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	text := must[string](t)(gov.Prometheus())
	for series, want := range map[string]float64{
		`llmgov_queue_depth{class=""}`:               1,
		`llmgov_queue_oldest_wait_seconds{class=""}`: 1.5,
		"llmgov_expired_permits_total":               0, // not yet
	} {
		if got := value(t, text, series); got != want {
			t.Errorf("waiting: %s = %v, want %v", series, got, want)
		}
	}
	m := must[*llmgov.Metrics](t)(gov.Metrics())
	if c := m.Queues.Class(""); m.Queues.Depth != 1 || c == nil || c.Depth != 1 || c.OldestWaitMs != 1500 || c.Tenants != 1 {
		t.Errorf("waiting: queues %+v", m.Queues)
	}

	// Past the window the waiter passes; past the TTL the first expires.
	if err := clock.Advance(120 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := gov.WakeWaiters(); err != nil {
		t.Fatal(err)
	}
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
	text = must[string](t)(gov.Prometheus())
	for series, want := range map[string]float64{
		`llmgov_queue_depth{class=""}`:               0,
		`llmgov_queue_oldest_wait_seconds{class=""}`: 0,
		`llmgov_queue_admitted_total{class=""}`:      1,
		"llmgov_expired_permits_total":               1,
	} {
		if got := value(t, text, series); got != want {
			t.Errorf("admitted: %s = %v, want %v", series, got, want)
		}
	}
	m = must[*llmgov.Metrics](t)(gov.Metrics())
	if c := m.Queues.Class(""); m.Snapshot.ExpiredPermits != 1 || c.Depth != 0 || c.Admitted != 1 || c.Tenants != 0 {
		t.Errorf("admitted: expired %d, queues %+v", m.Snapshot.ExpiredPermits, m.Queues)
	}
}

// A tenant guaranteed 100 tokens a minute: its first 100 are its own, what
// it gets past them is borrowed. Two waiters pass after 1 s and 2 s.
func TestPrometheusWaitsAndBorrowedTokensPerClass(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromJSON(`{
		"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]},
		           "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 10}]}},
		"shares": {"tenants/*": {"guarantee": 100, "window": "1m"}}}`, llmgov.WithClock(clock)))
	t.Cleanup(func() { gov.Close(); clock.Close() })
	request := llmgov.Request{Route: must[llmgov.Route](t)(gov.Route("tenants/acme", "p")), InputTokens: 100}
	first := must[*llmgov.Permit](t)(gov.TryAcquire(request))
	defer first.Close()
	admitted := make(chan error, 2)
	for range 2 {
		go func() {
			permit, err := gov.Acquire(context.Background(), request)
			if err == nil {
				permit.Close()
			}
			admitted <- err
		}()
	}
	untilWaiting(t, gov, 2)
	for depth := 1; depth >= 0; depth-- {
		if err := clock.Advance(time.Second); err != nil {
			t.Fatal(err)
		}
		if _, _, err := gov.WakeWaiters(); err != nil {
			t.Fatal(err)
		}
		untilWaiting(t, gov, depth)
	}
	for range 2 {
		if err := <-admitted; err != nil {
			t.Fatal(err)
		}
	}
	text := must[string](t)(gov.Prometheus())
	if !strings.Contains(text, "# TYPE llmgov_queue_wait_seconds histogram\n") {
		t.Errorf("no wait histogram in\n%s", text)
	}
	for series, want := range map[string]float64{
		`llmgov_queue_wait_seconds_bucket{le="0.5",class=""}`:  0,
		`llmgov_queue_wait_seconds_bucket{le="1.0",class=""}`:  1,
		`llmgov_queue_wait_seconds_bucket{le="2.5",class=""}`:  2,
		`llmgov_queue_wait_seconds_bucket{le="+Inf",class=""}`: 2,
		`llmgov_queue_wait_seconds_count{class=""}`:            2,
		`llmgov_queue_wait_seconds_sum{class=""}`:              3,
		`llmgov_queue_borrowed_tokens_total{class=""}`:         100, // the second one's
	} {
		if got := value(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The typed histogram's buckets are the exposition's.
	for _, bound := range llmgov.WaitBucketsSeconds {
		label := strconv.FormatFloat(bound, 'f', -1, 64)
		if !strings.Contains(label, ".") {
			label += ".0"
		}
		value(t, text, fmt.Sprintf(`llmgov_queue_wait_seconds_bucket{le="%s",class=""}`, label))
	}
	c := must[*llmgov.Metrics](t)(gov.Metrics()).Queues.Class("")
	if c == nil || c.BorrowedTokens != 100 || c.Wait.Count() != 2 || c.Wait.Sum() != 3*time.Second ||
		len(c.Wait.Counts) != len(llmgov.WaitBucketsSeconds)+1 {
		t.Fatalf("class metrics %+v", c)
	}
	one := slices.Index(llmgov.WaitBucketsSeconds, 1)
	if c.Wait.Counts[one] != 1 || c.Wait.Counts[one+1] != 1 || c.LongestAdmittedWaitMs != 2000 {
		t.Errorf("waits %+v", c.Wait)
	}
}
