package llmgov

/*
#include "llmgov.h"
*/
import "C"

// PlanInput is a deployment's limits and a workload's shape, for
// PlanCapacity. A nil field is unset: an unset limit does not bind, and an
// unset Latency or Utilisation takes the default (5 s, 0.9). Give at least
// one limit. A set value of 0 is refused like any other bad value (it never
// means "unset"), as in the core and the other languages.
type PlanInput struct {
	// RPM is requests per minute.
	RPM *float64
	// TPM is total (input + output) tokens per minute.
	TPM *float64
	// InputTPM is input tokens per minute.
	InputTPM *float64
	// OutputTPM is output tokens per minute.
	OutputTPM *float64
	// Concurrency is requests in flight at once.
	Concurrency *float64
	// AvgInput is the average input tokens per request (0 or more).
	AvgInput float64
	// AvgOutput is the average output tokens per request (0 or more).
	AvgOutput float64
	// P95Input is the 95th-percentile input tokens.
	P95Input *float64
	// P95Output is the 95th-percentile output tokens (what a reservation
	// holds).
	P95Output *float64
	// Latency is the average request latency in seconds (it bounds the
	// rate under a concurrency limit); nil is 5.
	Latency *float64
	// Utilisation is the fraction of the limits to plan for, in (0, 1];
	// nil is 0.9.
	Utilisation *float64
}

// Ceiling is one limit's ceiling on requests per minute.
type Ceiling struct {
	// Limit is "rpm", "tpm", "input_tpm", "output_tpm" or "concurrency".
	Limit string
	// RPM is the requests per minute it allows at 100% utilisation;
	// +Inf for a limit on tokens the requests do not use.
	RPM float64
}

// Plan is what PlanCapacity works out.
type Plan struct {
	// Ceilings holds each set limit's ceiling for average-sized requests,
	// in the order rpm, tpm, input_tpm, output_tpm, concurrency.
	Ceilings []Ceiling
	// Binding is the lowest ceiling's limit.
	Binding string
	// SustainableRPM is the lowest ceiling × utilisation.
	SustainableRPM float64
	// SustainableRPMReservingP95 is the same while reservations hold p95
	// sizes (as llmgov's do until settled); nil unless a p95 was given.
	SustainableRPMReservingP95 *float64
}

// setOptional writes an optional value and its has_ flag.
func setOptional(value *float64, field *C.double, has *C.bool) {
	if value != nil {
		*field, *has = C.double(*value), true
	}
}

func (in *PlanInput) c() C.llmgov_plan_input {
	c := C.llmgov_plan_input{avg_input: C.double(in.AvgInput), avg_output: C.double(in.AvgOutput)}
	setOptional(in.RPM, &c.rpm, &c.has_rpm)
	setOptional(in.TPM, &c.tpm, &c.has_tpm)
	setOptional(in.InputTPM, &c.input_tpm, &c.has_input_tpm)
	setOptional(in.OutputTPM, &c.output_tpm, &c.has_output_tpm)
	setOptional(in.Concurrency, &c.concurrency, &c.has_concurrency)
	setOptional(in.P95Input, &c.p95_input, &c.has_p95_input)
	setOptional(in.P95Output, &c.p95_output, &c.has_p95_output)
	setOptional(in.Latency, &c.latency, &c.has_latency)
	setOptional(in.Utilisation, &c.utilisation, &c.has_utilisation)
	return c
}

// PlanCapacity works out how many requests a minute a set of limits
// sustains for a workload's shape, and which limit binds: min(RPM, TPM ÷
// tokens, ITPM ÷ input, OTPM ÷ output, concurrency × 60 ÷ latency) ×
// utilisation, as `llmgov plan` prints it. Bad input is an *Error with code
// ErrInvalidRequest whose Field and Value name it ("rpm", "-1"); no limit
// at all names "rpm/tpm/input_tpm/output_tpm/concurrency".
func PlanCapacity(input PlanInput) (Plan, error) {
	in := input.c()
	var out C.llmgov_plan
	if err := call(func() C.llmgov_result { return C.llmgov_plan_capacity(&in, &out) }); err != nil {
		return Plan{}, err
	}
	plan := Plan{
		Ceilings:       make([]Ceiling, 0, int(out.ceilings_len)),
		Binding:        C.GoString(out.binding),
		SustainableRPM: float64(out.sustainable_rpm),
	}
	for _, c := range out.ceilings[:out.ceilings_len] {
		plan.Ceilings = append(plan.Ceilings, Ceiling{Limit: C.GoString(c.limit), RPM: float64(c.rpm)})
	}
	if out.has_sustainable_rpm_reserving_p95 {
		reserving := float64(out.sustainable_rpm_reserving_p95)
		plan.SustainableRPMReservingP95 = &reserving
	}
	return plan, nil
}
