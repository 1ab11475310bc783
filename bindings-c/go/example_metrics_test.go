package llmgov_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"llmgov.dev/llmgov"
)

// Everything observable, as JSON written where `llmgov top` reads it, and
// the same value typed.
func ExampleGovernor_MetricsJSON() {
	gov, err := llmgov.FromTOML(exampleProfiles, llmgov.WithClock(llmgov.NewManualClock(0)))
	if err != nil {
		panic(err)
	}
	defer gov.Close()
	route, _ := gov.Route("openai/key-1")
	sent, err := gov.TryAcquire(llmgov.Request{Route: route})
	if err != nil {
		panic(err)
	}
	defer sent.Close()
	sent.Report(429, http.Header{"Retry-After": {"1"}}, []byte(`{"error":{"type":"requests","code":"rate_limit_exceeded"}}`))
	if _, err := gov.TryAcquire(llmgov.Request{Route: route}); err == nil {
		panic("one request a minute")
	}

	text, err := gov.MetricsJSON()
	if err != nil {
		panic(err)
	}
	path := filepath.Join(os.TempDir(), "llmgov-example-metrics.json")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		panic(err)
	}
	defer os.Remove(path)
	// Now `llmgov top` + path draws it; the application might serve it
	// over HTTP instead.

	m, err := gov.Metrics()
	if err != nil {
		panic(err)
	}
	local, _ := m.Refused("requests", llmgov.RejectedLocally)
	provider, _ := m.Refused("requests", llmgov.AdmittedThenProviderRejected)
	fmt.Printf("admitted %d, refused here %d, by the provider %d, amplification %.1f\n",
		m.Snapshot.Admitted, local, provider, m.RetryAmplification)
	// Output:
	// admitted 1, refused here 1, by the provider 1, amplification 1.0
}
