package llmgov_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"llmgov.dev/llmgov"
)

// The values are bindings-python/tests/test_plan.py's, so the languages
// agree.

func num(v float64) *float64 { return &v }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// 60 RPM, 100k TPM, 1500 + 500 tokens a request: the seed article's batch.
func seedBatch() llmgov.PlanInput {
	return llmgov.PlanInput{RPM: num(60), TPM: num(100_000), AvgInput: 1500, AvgOutput: 500}
}

func mustPlan(t *testing.T, input llmgov.PlanInput) llmgov.Plan {
	t.Helper()
	plan, err := llmgov.PlanCapacity(input)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestPlanTheSeedBatchCaseIsTokenBound(t *testing.T) {
	input := seedBatch()
	input.Utilisation = num(1)
	plan := mustPlan(t, input)
	want := []llmgov.Ceiling{{Limit: "rpm", RPM: 60}, {Limit: "tpm", RPM: 50}}
	if plan.Binding != "tpm" || !near(plan.SustainableRPM, 50) || !reflect.DeepEqual(plan.Ceilings, want) {
		t.Fatalf("plan = %+v", plan)
	}
	if plan.SustainableRPMReservingP95 != nil {
		t.Fatalf("no p95 given, yet reserving = %v", *plan.SustainableRPMReservingP95)
	}
}

func TestPlanConcurrencyAndP95Reservations(t *testing.T) {
	input := seedBatch()
	input.Concurrency, input.Latency = num(10), num(30)
	// 10 in flight for 30 s: 20 a minute, 18 at the default 90%.
	plan := mustPlan(t, input)
	if plan.Binding != "concurrency" || !near(plan.SustainableRPM, 18) || len(plan.Ceilings) != 3 {
		t.Fatalf("plan = %+v", plan)
	}

	input = seedBatch()
	input.P95Output = num(1500)
	held := mustPlan(t, input)
	if !near(held.SustainableRPM, 45) || held.SustainableRPMReservingP95 == nil ||
		!near(*held.SustainableRPMReservingP95, 30) {
		t.Fatalf("plan = %+v", held)
	}
}

func TestPlanALimitOnTokensRequestsDoNotUseAllowsAnyRate(t *testing.T) {
	plan := mustPlan(t, llmgov.PlanInput{RPM: num(60), OutputTPM: num(1000), AvgInput: 100, AvgOutput: 0})
	want := []llmgov.Ceiling{{Limit: "rpm", RPM: 60}, {Limit: "output_tpm", RPM: math.Inf(1)}}
	if plan.Binding != "rpm" || !reflect.DeepEqual(plan.Ceilings, want) {
		t.Fatalf("plan = %+v", plan)
	}
}

func TestPlanBadInputNamesTheField(t *testing.T) {
	limits := "rpm/tpm/input_tpm/output_tpm/concurrency"
	cases := []struct {
		change       func(*llmgov.PlanInput)
		field, value string
	}{
		{func(in *llmgov.PlanInput) { in.RPM = num(-1) }, "rpm", "-1"},
		{func(in *llmgov.PlanInput) { in.TPM = num(0) }, "tpm", "0"},
		{func(in *llmgov.PlanInput) { in.Utilisation = num(1.5) }, "utilisation", "1.5"},
		{func(in *llmgov.PlanInput) { in.Latency = num(math.NaN()) }, "latency", "NaN"},
		{func(in *llmgov.PlanInput) { in.AvgInput = -5 }, "avg_input", "-5"},
		{func(in *llmgov.PlanInput) { in.Concurrency = num(math.Inf(1)) }, "concurrency", "inf"},
		{func(in *llmgov.PlanInput) { in.RPM, in.TPM = nil, nil }, limits, "none"},
	}
	for _, c := range cases {
		input := llmgov.PlanInput{RPM: num(60), AvgInput: 100, AvgOutput: 100}
		c.change(&input)
		_, err := llmgov.PlanCapacity(input)
		var e *llmgov.Error
		if !errors.Is(err, llmgov.ErrInvalidRequest) || !errors.As(err, &e) {
			t.Fatalf("%s: err = %v", c.field, err)
		}
		if e.Field != c.field || e.Value != c.value || e.CodeName != "invalid_request" {
			t.Errorf("%s: field %q, value %q, code %q: %s", c.field, e.Field, e.Value, e.CodeName, e.Message)
		}
	}
}

// The seed article's batch case: 60 RPM and 100k TPM, 2000-token requests.
func ExamplePlanCapacity() {
	rpm, tpm, utilisation := 60.0, 100_000.0, 1.0
	plan, err := llmgov.PlanCapacity(llmgov.PlanInput{
		RPM: &rpm, TPM: &tpm, AvgInput: 1500, AvgOutput: 500, Utilisation: &utilisation,
	})
	if err != nil {
		panic(err) // an *llmgov.Error naming the field and the value
	}
	fmt.Printf("%s binds: %.0f requests a minute\n", plan.Binding, plan.SustainableRPM)
	for _, c := range plan.Ceilings {
		fmt.Printf("  %s allows %.0f\n", c.Limit, c.RPM)
	}
	// Output:
	// tpm binds: 50 requests a minute
	//   rpm allows 60
	//   tpm allows 50
}
