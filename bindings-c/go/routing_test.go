package llmgov_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"llmgov.dev/llmgov"
)

// Two keys of one OpenAI organisation, an Azure region, and a cheaper
// fallback profile the eval class may not use.
var routingConfig = func() string {
	limits := func(rpm, tpm int) string {
		return fmt.Sprintf(`[{"dimension":"requests","amount":%d,"window":"1m"},{"dimension":"tokens","amount":%d,"window":"1m"}]`, rpm, tpm)
	}
	return `{"adaptive":{"breaker":{"failures":1,"pauses":["30s"]}},"scopes":{` +
		`"openai/org":{"provider":true,"limits":` + limits(100, 10000) + `},` +
		`"openai/org/key-1":{"provider":true,"limits":` + limits(100, 10000) + `},` +
		`"openai/org/key-2":{"provider":true,"limits":` + limits(100, 10000) + `},` +
		`"azure/eastus":{"provider":true,"limits":` + limits(100, 8000) + `},` +
		`"mini/org":{"provider":true,"limits":` + limits(100, 100000) + `},` +
		`"tenants/*":{"limits":[{"dimension":"tokens","amount":1000000,"window":"1m"}]}},` +
		`"profiles":{"gpt-4o":{"deployments":["openai/org/key-1","openai/org/key-2","azure/eastus"],` +
		`"fallback":"mini","fallback_allowed":{"eval":false}},"mini":{"deployments":["mini/org"]}}}`
}()

func routingGovernor(t *testing.T) (*llmgov.Governor, *llmgov.Profile) {
	t.Helper()
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromJSON(routingConfig, llmgov.WithClock(clock)))
	profile := must[*llmgov.Profile](t)(gov.Profile("gpt-4o", "tenants/acme"))
	t.Cleanup(func() { profile.Close(); gov.Close(); clock.Close() })
	return gov, profile
}

func TestProfileChoosesTheRoomiestDeploymentAndFailsOver(t *testing.T) {
	gov, profile := routingGovernor(t)
	ask := func(tokens uint64) *llmgov.Routed {
		t.Helper()
		return must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: tokens}))
	}
	if first := ask(6000); first.Deployment != "openai/org/key-1" || first.FellBack {
		t.Fatalf("all idle: want the first deployment, got %+v", first)
	}
	// The org pool is 40% free, so key-2 (same org) is too, and Azure,
	// untouched and last in the list, has the most room.
	for range 2 {
		if next := ask(1000); next.Deployment != "azure/eastus" || next.FellBack {
			t.Fatalf("want the roomiest, azure/eastus, got %+v", next)
		}
	}

	gov, profile = routingGovernor(t)
	first := ask(7000)
	if first.Deployment != "openai/org/key-1" || first.Profile != "gpt-4o" || first.FellBack {
		t.Fatalf("all idle: want the first deployment, got %+v", first)
	}
	// The org pool cannot take 7000 more, so key-2 refuses too.
	if second := ask(7000); second.Deployment != "azure/eastus" {
		t.Fatalf("want failover to azure, got %+v", second)
	}
	if err := first.Permit.Settle(llmgov.Usage{InputTokens: 7000}); err != nil {
		t.Fatal(err)
	}
}

func TestProfileSkipsAnOpenBreaker(t *testing.T) {
	gov, profile := routingGovernor(t)
	probe := must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, llmgov.Request{}))
	if probe.Deployment != "openai/org/key-1" {
		t.Fatalf("got %+v", probe)
	}
	must[llmgov.Classification](t)(probe.Permit.Report(503, nil, nil))
	next := must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, llmgov.Request{}))
	if next.Deployment != "azure/eastus" {
		t.Fatalf("key-1's breaker is open: want azure, got %+v", next)
	}
}

func TestProfileFallsBackOnlyWhereTheClassAllows(t *testing.T) {
	gov, profile := routingGovernor(t)
	must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: 9000}))
	eval := must[llmgov.Class](t)(gov.Class("eval"))
	_, err := gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: 9000, Class: eval})
	var e *llmgov.Error
	if !errors.As(err, &e) || e.Code != llmgov.ErrRateLimited || e.Scope != "openai/org" || !e.HasRetryAfter {
		t.Fatalf("eval may not fall back: want rate_limited on openai/org, got %v", err)
	}
	batch := must[llmgov.Class](t)(gov.Class("batch"))
	routed := must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: 9000, Class: batch}))
	if !routed.FellBack || routed.Profile != "mini" || routed.Deployment != "mini/org" {
		t.Fatalf("batch falls back to mini: got %+v", routed)
	}
}

func TestProfileBadInputNamesTheFieldAndValue(t *testing.T) {
	gov, profile := routingGovernor(t)
	_, err := gov.Profile("nope", "tenants/acme")
	var e *llmgov.Error
	if !errors.As(err, &e) || e.Code != llmgov.ErrInvalidRequest || e.Field != "profile" || e.Value != "nope" ||
		!strings.Contains(e.Message, "gpt-4o") {
		t.Fatalf("want invalid_request naming profile = nope and the known ones, got %v", err)
	}
	if _, err := gov.Profile("gpt-4o", "nowhere/x"); !errors.Is(err, llmgov.ErrUnknownScope) {
		t.Fatalf("want unknown_scope, got %v", err)
	}
	other, _ := routingGovernor(t)
	_, err = other.TryAcquireProfile(profile, llmgov.Request{})
	if !errors.As(err, &e) || e.Code != llmgov.ErrInvalidRequest || e.Field != "profile" {
		t.Fatalf("a profile of another governor: got %v", err)
	}
	profile.Close()
	if _, err := gov.TryAcquireProfile(profile, llmgov.Request{}); !errors.Is(err, llmgov.ErrClosed) {
		t.Fatalf("closed profile: got %v", err)
	}
}

// Many goroutines acquire through one profile; the org pool's limit holds
// across its keys (run under -race).
func TestProfileIsSafeForConcurrentUse(t *testing.T) {
	gov, profile := routingGovernor(t)
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				r, err := gov.TryAcquireProfile(profile, llmgov.Request{InputTokens: 100})
				if err != nil {
					continue
				}
				mu.Lock()
				counts[r.Deployment]++
				mu.Unlock()
				r.Permit.Close()
			}
		}()
	}
	wg.Wait()
	// 400 requests of 100 tokens: the org's pool holds 100 across its two
	// keys, azure 80 (8000 tokens), mini 100 (its requests per minute).
	org := counts["openai/org/key-1"] + counts["openai/org/key-2"]
	if org != 100 || counts["azure/eastus"] != 80 || counts["mini/org"] != 100 {
		t.Fatalf("want 100 on the org's keys, 80 on azure, 100 on mini: %v", counts)
	}
}

// A tenant with a daily budget of 1.0 and a gpt-4o profile that degrades
// to mini at 60% of it and refuses at 85%.
const costConfig = `{
  "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}, "mini": {"input": 0.15, "output": 0.6}},
  "scopes": {
    "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}]},
    "openai/mini": {"provider": true, "pricing": "mini", "limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}]},
    "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d", "slots": 24}]}
  },
  "profiles": {
    "gpt-4o": {"deployments": ["openai/gpt-4o"], "budget": {"degrade_at": 0.6, "degrade_to": "mini", "refuse_at": 0.85}},
    "mini": {"deployments": ["openai/mini"]}
  }
}`

func TestProfileDegradesPastItsBudgetThresholdThenRefuses(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	defer clock.Close()
	gov := must[*llmgov.Governor](t)(llmgov.FromJSON(costConfig, llmgov.WithClock(clock)))
	defer gov.Close()
	profile := must[*llmgov.Profile](t)(gov.Profile("gpt-4o", "tenants/acme"))
	defer profile.Close()
	big := llmgov.Request{InputTokens: 100_000} // 0.25 on gpt-4o, 0.015 on mini
	for range 3 {
		r := must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, big))
		if r.Profile != "gpt-4o" || r.Degraded {
			t.Fatalf("under 60%%: want gpt-4o, got %+v", r)
		}
	}
	cheap := must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, big))
	if !cheap.Degraded || cheap.FellBack || cheap.Profile != "mini" || cheap.Deployment != "openai/mini" {
		t.Fatalf("past 60%%: want mini, degraded, got %+v", cheap)
	}
	for range 6 {
		must[*llmgov.Routed](t)(gov.TryAcquireProfile(profile, big))
	}
	_, err := gov.TryAcquireProfile(profile, big)
	var e *llmgov.Error
	if !errors.As(err, &e) || e.Code != llmgov.ErrRateLimited || e.Dimension != "cost" || e.Scope != "tenants/acme" {
		t.Fatalf("past 85%%: want a cost refusal on tenants/acme, got %v", err)
	}
}
