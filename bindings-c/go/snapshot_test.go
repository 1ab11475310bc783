package llmgov_test

import (
	"testing"

	"llmgov.dev/llmgov"
)

const snapshotConfig = `
[scopes."openai/org"]
provider = true
limits = [
  { dimension = "tokens", amount = 10000, window = "1h", algorithm = "sliding_window", slots = 60 },
  { dimension = "concurrency", amount = 4 },
]
`

func limitOf(t *testing.T, gov *llmgov.Governor, dimension llmgov.Dimension) llmgov.LimitSnapshot {
	t.Helper()
	s := must[*llmgov.Snapshot](t)(gov.Snapshot())
	for _, l := range s.Scopes[0].Limits {
		if l.Dimension == dimension {
			return l
		}
	}
	t.Fatalf("no %s limit in %+v", dimension, s.Scopes[0])
	return llmgov.LimitSnapshot{}
}

// A limit's in-use splits into what pending permits reserve and what
// settled requests used; provider scopes report their breaker.
func TestSnapshotSplitsReservedFromUsed(t *testing.T) {
	clock := llmgov.NewManualClock(0)
	defer clock.Close()
	gov := must[*llmgov.Governor](t)(llmgov.FromTOML(snapshotConfig, llmgov.WithClock(clock)))
	defer gov.Close()
	route := must[llmgov.Route](t)(gov.Route("openai/org"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 100, MaxOutputTokens: 50}))
	if l := limitOf(t, gov, "tokens"); l.InUse != 150 || l.Reserved != 150 || l.Used != 0 {
		t.Errorf("pending: %+v", l)
	}
	if l := limitOf(t, gov, "concurrency"); l.Reserved != 1 || l.Used != 0 {
		t.Errorf("in flight: %+v", l)
	}
	if err := permit.Settle(llmgov.Usage{InputTokens: 100, OutputTokens: 20}); err != nil {
		t.Fatal(err)
	}
	if l := limitOf(t, gov, "tokens"); l.InUse != 120 || l.Reserved != 0 || l.Used != 120 {
		t.Errorf("settled: %+v", l)
	}
	if s := must[*llmgov.Snapshot](t)(gov.Snapshot()); s.Scopes[0].Breaker != "closed" {
		t.Errorf("breaker %q, want closed", s.Scopes[0].Breaker)
	}
}
