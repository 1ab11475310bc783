package llmgov_test

import (
	"fmt"
	"sort"
	"strings"

	"llmgov.dev/llmgov"
)

const exampleProfiles = `
[scopes."openai/key-1"]
provider = true
limits = [{ dimension = "requests", amount = 1, window = "1m" }]
[scopes."azure/eastus"]
provider = true
limits = [{ dimension = "requests", amount = 1, window = "1m" }]
[profiles.gpt-4o]
deployments = ["openai/key-1", "azure/eastus"]
`

// Two deployments of one model: the second takes over when the first is
// full, and a request both refuse reaches the event callback, once.
func ExampleGovernor_TryAcquireProfile() {
	gov, err := llmgov.FromTOML(exampleProfiles, llmgov.WithClock(llmgov.NewManualClock(0)))
	if err != nil {
		panic(err)
	}
	defer gov.Close()
	err = gov.OnEvent(func(e llmgov.Event) {
		fmt.Printf("event: %s %s by %s\n", e.Kind, e.Code, e.Scope)
	})
	if err != nil {
		panic(err)
	}
	// Resolve once; acquire through it on every request.
	profile, err := gov.Profile("gpt-4o")
	if err != nil {
		panic(err)
	}
	defer profile.Close()
	for range 3 {
		routed, err := gov.TryAcquireProfile(profile, llmgov.Request{})
		if err != nil {
			fmt.Println("refused:", err)
			continue
		}
		fmt.Println(routed.Profile, "on", routed.Deployment)
		// … call the provider …
		_ = routed.Permit.Settle(llmgov.Usage{})
	}
	// Output:
	// gpt-4o on openai/key-1
	// gpt-4o on azure/eastus
	// event: denied rate_limited by openai/key-1
	// refused: llmgov: rate limited on scope `openai/key-1`, dimension requests; retry after 60000 ms
}

// The Prometheus text, for a /metrics handler.
func ExampleGovernor_Prometheus() {
	gov, err := llmgov.FromTOML(exampleProfiles, llmgov.WithClock(llmgov.NewManualClock(0)))
	if err != nil {
		panic(err)
	}
	defer gov.Close()
	route, _ := gov.Route("openai/key-1")
	if _, err := gov.TryAcquire(llmgov.Request{Route: route}); err != nil {
		panic(err)
	}
	text, err := gov.Prometheus()
	if err != nil {
		panic(err)
	}
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "llmgov_in_use{") || strings.HasPrefix(line, "llmgov_admitted_total") {
			lines = append(lines, line)
		}
	}
	sort.Strings(lines) // series of one family come in no set order
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// llmgov_admitted_total 1
	// llmgov_in_use{scope="azure/eastus",dimension="requests",window_ms="60000"} 0
	// llmgov_in_use{scope="openai/key-1",dimension="requests",window_ms="60000"} 1
}
