package llmgov_test

import (
	"errors"
	"strings"
	"testing"

	"llmgov.dev/llmgov"
)

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
}
