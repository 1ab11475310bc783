package llmgov_test

import (
	"errors"
	"fmt"
	"time"

	"llmgov.dev/llmgov"
)

// A tenant's budget and a provider's limits, one request admitted and
// reconciled, the next refused with the scope, the dimension and the wait.
func Example() {
	gov, err := llmgov.FromTOML(`
[scopes."openai/org-main/gpt-4o"]
limits = [
  { dimension = "requests", amount = 500, window = "1m" },
  { dimension = "tokens", amount = 30000, window = "1m" },
]
[scopes."tenants/*"]
limits = [{ dimension = "tokens", amount = 5000, window = "1m" }]
`, llmgov.WithClock(llmgov.NewManualClock(0)))
	if err != nil {
		panic(err)
	}
	defer gov.Close()

	// Resolve paths once; a route is a number to reuse on every request.
	route, err := gov.Route("tenants/acme", "openai/org-main/gpt-4o")
	if err != nil {
		panic(err)
	}
	request := llmgov.Request{Route: route, InputTokens: 3000, MaxOutputTokens: 1000}
	permit, err := gov.TryAcquire(request)
	if err != nil {
		panic(err)
	}
	// … call the provider …
	if err := permit.Settle(llmgov.Usage{InputTokens: 3000, OutputTokens: 412}); err != nil {
		panic(err)
	}

	_, err = gov.TryAcquire(request)
	var refusal *llmgov.Error
	if errors.Is(err, llmgov.ErrRateLimited) && errors.As(err, &refusal) {
		fmt.Printf("%s is out of %s; retry after %v\n", refusal.Scope, refusal.Dimension, refusal.RetryAfter)
	}
	// Output:
	// tenants/acme is out of tokens; retry after 28.944s
}

// Classifying a provider's 429 without a governor.
func ExampleClassifyResponse() {
	body := []byte(`{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}`)
	header := map[string][]string{"Retry-After": {"20"}}
	c, err := llmgov.ClassifyResponse(429, header, body, llmgov.ProviderOpenAI, time.Now())
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Kind, c.Dimension, c.RetryAfter, c.Retryable)
	// Output: rate_limited tokens 20s true
}
