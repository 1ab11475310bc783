package llmgov

/*
#include "llmgov.h"
*/
import "C"

import (
	"runtime"
)

// Snapshot is every scope and counter at one moment.
type Snapshot struct {
	NowMs                        uint64          `json:"now_ms"`
	Admitted                     uint64          `json:"admitted"`
	RateLimited                  uint64          `json:"rate_limited"`
	NeverFits                    uint64          `json:"never_fits"`
	CircuitOpen                  uint64          `json:"circuit_open"`
	AdmittedThenProviderRejected uint64          `json:"admitted_then_provider_rejected"`
	ExpiredPermits               uint64          `json:"expired_permits"`
	Scopes                       []ScopeSnapshot `json:"scopes"`
}

// ScopeSnapshot is one scope's limits at one moment.
type ScopeSnapshot struct {
	Path   string          `json:"path"`
	Limits []LimitSnapshot `json:"limits"`
	// Breaker is set on provider scopes: "closed", "open" or "half_open".
	Breaker string `json:"breaker,omitempty"`
}

// LimitSnapshot is one limit at one moment.
type LimitSnapshot struct {
	Dimension        Dimension `json:"dimension"`
	Algorithm        string    `json:"algorithm"`
	ConfiguredAmount uint64    `json:"configured_amount"`
	Amount           uint64    `json:"amount"`
	// EffectiveAmount is set on provider scopes' token buckets: the amount
	// per window enforced now, after AIMD, slow start and the provider's
	// limit headers.
	EffectiveAmount *uint64 `json:"effective_amount,omitempty"`
	Burst           uint64  `json:"burst"`
	// WindowMs is nil for concurrency, which has no window.
	WindowMs *uint64 `json:"window_ms,omitempty"`
	// Available is what a request could take now; negative in debt.
	Available int64 `json:"available"`
	// InUse is what is taken: Reserved plus Used.
	InUse uint64 `json:"in_use"`
	// Reserved is what pending permits hold here (estimates not yet
	// settled); on a concurrency limit, the permits in flight.
	Reserved uint64 `json:"reserved"`
	// Used is what settled and expired requests hold here, not yet refilled
	// or aged out.
	Used uint64 `json:"used"`
	// ReservesOutput is "max_tokens" or "expected" on output and token
	// limits.
	ReservesOutput string `json:"reserves_output,omitempty"`
	// Expired is set on concurrency limits: permits that expired holding a
	// slot here.
	Expired *uint64 `json:"expired,omitempty"`
}

// SnapshotJSON is every scope and counter now, as the core's JSON.
func (g *Governor) SnapshotJSON() ([]byte, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_governor_snapshot_json(h, &out) })
	return takeString(out, err)
}

// Snapshot is every scope and counter now.
func (g *Governor) Snapshot() (*Snapshot, error) {
	return decoded[Snapshot](g.SnapshotJSON())
}

// ScopeSnapshot is one scope's limits now.
func (g *Governor) ScopeSnapshot(scope Scope) (*ScopeSnapshot, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_governor_scope_snapshot_json(h, C.uint64_t(scope), &out) })
	return decoded[ScopeSnapshot](takeString(out, err))
}

// Prometheus is every limit, counter, breaker and queue now in the
// Prometheus text format (OpenMetrics, ending in "# EOF"), for an
// application's /metrics endpoint.
func (g *Governor) Prometheus() (string, error) {
	h, err := g.ptr()
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_governor_prometheus(h, &out) })
	text, err := takeString(out, err)
	return string(text), err
}
