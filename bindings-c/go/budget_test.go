package llmgov_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"llmgov.dev/llmgov"
)

// Spending one budget from many goroutines (as core/tests/cost.rs): a
// tenant has 0.5 a day (500000 millionths) on gpt-4o at 2.5 input and 10
// output per 1M tokens. Each request estimates 1000 input + 500 max output,
// 2500 + 5000 = 7500 millionths.
const (
	budgetConfig = `{"pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}},
		"scopes": {
			"openai/gpt-4o": {"provider": true, "pricing": "gpt-4o",
				"limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}]},
			"tenants/*": {"limits": [{"dimension": "cost", "budget": 0.5, "window": "1d", "slots": 24}]}}}`
	budget     = 500000
	estimate   = 7500
	spenders   = 8
	attempts   = 1000
	maxOverage = 2000 // 700 output against 500 reserved
	maxRefund  = 4000 // 100 output against 500 reserved
)

// spending is what spenders did together, and the governor they did it on.
type spending struct {
	gov                  *llmgov.Governor
	request              llmgov.Request
	spent, costInUse     uint64
	admitted, refused    int
	admittedAfterRefusal int
	wrong                []error
}

// spendTogether runs spenders goroutines on a fresh budget, each settling
// with outputFrom to outputFrom+outputSpread-1 output tokens; the sum of
// their tallies.
func spendTogether(t *testing.T, outputFrom, outputSpread uint64) spending {
	t.Helper()
	clock := llmgov.NewManualClock(0)
	gov := must[*llmgov.Governor](t)(llmgov.FromJSON(budgetConfig, llmgov.WithClock(clock)))
	t.Cleanup(func() { gov.Close(); clock.Close() })
	route := must[llmgov.Route](t)(gov.Route("tenants/acme", "openai/gpt-4o"))
	request := llmgov.Request{Route: route, InputTokens: 1000, MaxOutputTokens: 500}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total = spending{gov: gov, request: request}
	)
	for g := range uint64(spenders) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine spending
			for i := range uint64(attempts) {
				permit, err := gov.TryAcquire(request)
				var e *llmgov.Error
				switch {
				case err == nil:
					if mine.refused > 0 {
						mine.admittedAfterRefusal++
					}
					output := outputFrom + (g*31+i*17)%outputSpread
					if err := permit.Settle(llmgov.Usage{InputTokens: 1000, OutputTokens: output}); err != nil {
						mine.wrong = append(mine.wrong, err)
					}
					permit.Close()
					mine.spent += 2500 + output*10
					mine.admitted++
				case errors.As(err, &e) && errors.Is(err, llmgov.ErrRateLimited) && e.Dimension == "cost" &&
					e.Scope == "tenants/acme":
					mine.refused++
				default:
					mine.wrong = append(mine.wrong, err)
				}
				runtime.Gosched() // let goroutines move between threads
			}
			mu.Lock()
			defer mu.Unlock()
			total.spent += mine.spent
			total.admitted += mine.admitted
			total.refused += mine.refused
			total.admittedAfterRefusal += mine.admittedAfterRefusal
			total.wrong = append(total.wrong, mine.wrong...)
		}()
	}
	wg.Wait()
	if len(total.wrong) != 0 || total.admitted+total.refused != spenders*attempts {
		t.Fatalf("admitted %d, refused %d, wrong %v", total.admitted, total.refused, total.wrong)
	}
	scope := must[llmgov.Scope](t)(gov.Scope("tenants/acme"))
	total.costInUse = must[*llmgov.ScopeSnapshot](t)(gov.ScopeSnapshot(scope)).Limits[0].InUse
	// The budget holds exactly the settled costs; each request in flight may
	// use at most one overage past its estimate.
	if total.costInUse != total.spent || total.spent > budget+spenders*maxOverage {
		t.Errorf("spent %d, the budget holds %d, of %d", total.spent, total.costInUse, budget)
	}
	return total
}

// Settles under and over their estimates: the budget is all but spent.
func TestConcurrentRequestsNeverOverspendABudget(t *testing.T) {
	total := spendTogether(t, 100, 601)
	// A refusal leaves less than one estimate free, plus what the other
	// goroutines' permits then in flight gave back.
	if total.spent <= budget-estimate-(spenders-1)*maxRefund || total.admitted <= budget/(2500+7000) {
		t.Errorf("refused while an estimate still fitted: spent %d in %d requests", total.spent, total.admitted)
	}
}

// Every settle over its estimate, so nothing ever comes back: once a
// request is refused no other is admitted, on any goroutine.
func TestAdmissionsStopOnceABudgetIsSpent(t *testing.T) {
	total := spendTogether(t, 501, 200)
	if total.admittedAfterRefusal != 0 || total.spent <= budget-estimate {
		t.Errorf("admitted %d after a refusal; spent %d", total.admittedAfterRefusal, total.spent)
	}
	_, err := total.gov.TryAcquire(total.request)
	var e *llmgov.Error
	if !errors.As(err, &e) || e.Dimension != "cost" {
		t.Errorf("want a refusal on cost, got %v", err)
	}
}
