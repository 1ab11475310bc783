package llmgov

/*
#include "llmgov.h"
*/
import "C"

import (
	"runtime"
	"time"
)

// Metrics is everything a governor exposes at one moment: the snapshot,
// the waiting queues, and what it observed beyond them. The Prometheus
// text is drawn from the same value, and `llmgov top FILE_OR_URL` draws its
// JSON (MetricsJSON) in a terminal.
type Metrics struct {
	// Snapshot is every scope, limit and counter.
	Snapshot Snapshot `json:"snapshot"`
	// Queues is the waiting queues, per traffic class.
	Queues QueueMetrics `json:"queues"`
	// Refusals counts refused requests by the dimension named and by who
	// refused, one entry per pair (zeros included).
	Refusals []RefusalCount `json:"refusals"`
	// EstimateErrors is how far settled requests were from their estimates,
	// per provider route and side.
	EstimateErrors []EstimateError `json:"estimate_errors"`
	// RetryAmplification is requests sent per request the provider did not
	// refuse: admitted ÷ (admitted − provider rejections); 1 before any
	// success.
	RetryAmplification float64 `json:"retry_amplification"`
}

// Who refused a request, in RefusalCount.GatewayDecision.
const (
	// RejectedLocally: llmgov refused before sending.
	RejectedLocally = "rejected_locally"
	// AdmittedThenProviderRejected: the provider refused after llmgov
	// admitted.
	AdmittedThenProviderRejected = "admitted_then_provider_rejected"
)

// RefusalCount is the refusals of one dimension by one party.
type RefusalCount struct {
	// Dimension is a ledger dimension, or "none" for local refusals that
	// name none (an open breaker, a full queue); for the provider's, also
	// "daily_requests", "daily_tokens", or "unknown" where it did not say.
	Dimension string `json:"dimension"`
	// GatewayDecision is RejectedLocally or AdmittedThenProviderRejected.
	GatewayDecision string `json:"gateway_decision"`
	Count           uint64 `json:"count"`
}

// EstimateError is the estimate error of one provider route on one side:
// quantiles of actual ÷ estimated − 1 (0.25 is 25% under).
type EstimateError struct {
	// Scopes is the route's scope paths, outermost first.
	Scopes []string `json:"scopes"`
	// Side is "input" or "output".
	Side    string  `json:"side"`
	Samples uint64  `json:"samples"`
	P05     float64 `json:"p05"`
	P50     float64 `json:"p50"`
	P95     float64 `json:"p95"`
}

// WaitBucketsSeconds are the upper bounds of WaitHistogram's buckets, in
// seconds (the le labels of llmgov_queue_wait_seconds); a last, unbounded
// bucket follows them.
var WaitBucketsSeconds = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 600}

// WaitHistogram is how long admitted waiters waited.
type WaitHistogram struct {
	// Counts[i] is the waits at most WaitBucketsSeconds[i] and above the
	// bound before it; the last entry counts waits past every bound.
	Counts []uint64 `json:"counts"`
	// SumNs is all waits together, in nanoseconds.
	SumNs uint64 `json:"sum_ns"`
}

// Count is the waits counted.
func (h WaitHistogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Sum is all waits together.
func (h WaitHistogram) Sum() time.Duration { return nanos(h.SumNs) }

// Class is the metrics of the class named name (empty for the default
// class), or nil if it has never had a waiter.
func (m *QueueMetrics) Class(name string) *ClassMetrics {
	for i := range m.Classes {
		if m.Classes[i].Class == name {
			return &m.Classes[i]
		}
	}
	return nil
}

// Refused is the count of refusals of dimension by gatewayDecision, and
// whether the pair is listed.
func (m *Metrics) Refused(dimension, gatewayDecision string) (uint64, bool) {
	for _, r := range m.Refusals {
		if r.Dimension == dimension && r.GatewayDecision == gatewayDecision {
			return r.Count, true
		}
	}
	return 0, false
}

// MetricsJSON is everything observable now, as the core's JSON: write it
// to a file or serve it, and `llmgov top FILE_OR_URL` draws it.
func (g *Governor) MetricsJSON() ([]byte, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_governor_metrics_json(h, &out) })
	return takeString(out, err)
}

// Metrics is everything observable now.
func (g *Governor) Metrics() (*Metrics, error) {
	return decoded[Metrics](g.MetricsJSON())
}
