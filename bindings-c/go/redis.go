package llmgov

/*
#include <stdlib.h>
#include "llmgov.h"
*/
import "C"

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
)

// RedisGovernor is a governor whose shared scopes (those under
// [redis.scopes] in its config) are enforced across processes through
// Redis, in any language: a Rust, Python or Go process on the same prefix
// spends the same budget. Its other scopes stay local to the process. Its
// methods may be called from any number of goroutines at once.
type RedisGovernor struct {
	handle  *C.llmgov_redis_governor
	closed  atomic.Bool
	cleanup runtime.Cleanup
	clock   *ManualClock
}

// RedisRoute is a set of scopes on a RedisGovernor, resolved once from its
// paths; like a Route, valid only with the governor that made it.
type RedisRoute uint64

// RedisRequest is what a request asks a RedisGovernor to reserve. Shared
// scopes have no traffic classes and reserve MaxOutputTokens as output.
type RedisRequest struct {
	Route RedisRoute
	// InputTokens is the estimated prompt, cached tokens included.
	InputTokens uint64
	// CachedInputTokens is the part of InputTokens expected from cache.
	CachedInputTokens uint64
	// MaxOutputTokens is the request's max_tokens.
	MaxOutputTokens uint64
}

// RedisHealth is a RedisGovernor's link to Redis: Degraded while Redis
// fails and shared scopes admit from each limit ÷ expected_processes.
type RedisHealth struct {
	Degraded           bool    `json:"degraded"`
	FallbackAdmissions uint64  `json:"fallback_admissions"`
	RedisErrors        uint64  `json:"redis_errors"`
	Recoveries         uint64  `json:"recoveries"`
	StateResets        uint64  `json:"state_resets"`
	RedisCalls         uint64  `json:"redis_calls"`
	LastError          *string `json:"last_error"`
}

const redisGovernorMakers = "NewRedisGovernorFromTOML or NewRedisGovernorFromJSON"
const redisPermitMakers = "RedisGovernor.TryAcquire or RedisGovernor.Acquire"

// NewRedisGovernorFromTOML builds a RedisGovernor from a TOML config: the
// local governor's sections plus [redis] (url, else the LLMGOV_REDIS_URL
// environment variable; prefix; expected_processes; [redis.scopes."path"]
// with mode "exact" or "leased"). A bad config is an *Error with code
// ErrInvalidConfig naming the field ("redis.lease_ttl") and the value.
// WithClock gives the clock of local limits, permit expiry and Acquire's
// timeout; shared limits run on Redis's time.
func NewRedisGovernorFromTOML(config string, opts ...Option) (*RedisGovernor, error) {
	return buildRedis("toml", config, opts, func(text *C.char, clock *C.llmgov_manual_clock, out **C.llmgov_redis_governor) C.llmgov_result {
		return C.llmgov_redis_governor_from_toml(text, clock, out)
	})
}

// NewRedisGovernorFromJSON is NewRedisGovernorFromTOML from the config's
// JSON form, with a "redis" object.
func NewRedisGovernorFromJSON(config string, opts ...Option) (*RedisGovernor, error) {
	return buildRedis("json", config, opts, func(text *C.char, clock *C.llmgov_manual_clock, out **C.llmgov_redis_governor) C.llmgov_result {
		return C.llmgov_redis_governor_from_json(text, clock, out)
	})
}

type redisConstructor func(*C.char, *C.llmgov_manual_clock, **C.llmgov_redis_governor) C.llmgov_result

func buildRedis(field, text string, opts []Option, make redisConstructor) (*RedisGovernor, error) {
	handle, o, err := construct(field, text, opts, make)
	if err != nil {
		return nil, err
	}
	g := &RedisGovernor{handle: handle, clock: o.clock}
	g.cleanup = runtime.AddCleanup(g, func(h *C.llmgov_redis_governor) { C.llmgov_redis_governor_free(h) }, handle)
	return g, nil
}

// Close releases the governor now rather than when it is garbage
// collected: with its last permit, its heartbeat stops and its leases go
// back to Redis. Permits not yet closed keep it alive and can still be
// settled. Close must not run concurrently with other methods; later calls
// return ErrClosed.
func (g *RedisGovernor) Close() {
	if g == nil || g.handle == nil {
		return
	}
	if g.closed.CompareAndSwap(false, true) {
		g.cleanup.Stop()
		C.llmgov_redis_governor_free(g.handle)
	}
}

// ptr is the C governor, or why g cannot be used. Callers keep g alive
// (runtime.KeepAlive) until C is done with the handle: were g unreachable
// during the call, its cleanup could free the handle under it.
func (g *RedisGovernor) ptr() (*C.llmgov_redis_governor, error) {
	if g == nil || g.handle == nil {
		return nil, errNil("governor", redisGovernorMakers)
	}
	if g.closed.Load() {
		return nil, errClosed("governor")
	}
	return g.handle, nil
}

// Route resolves scope paths to a route: every configured or template
// scope on every prefix of every path, each once, shared or local.
func (g *RedisGovernor) Route(paths ...string) (RedisRoute, error) {
	h, err := g.ptr()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(g)
	cpaths, free, err := cStrings("paths", paths)
	if err != nil {
		return 0, err
	}
	defer free()
	var route C.uint64_t
	err = call(func() C.llmgov_result {
		return C.llmgov_redis_governor_route(h, &cpaths[0], C.size_t(len(paths)), &route)
	})
	return RedisRoute(route), err
}

// TryAcquire reserves the request on every scope of its route now, in
// Redis and locally, or nothing. A refusal is an *Error with code
// ErrRateLimited (RetryAfter from Redis's GCRA in either mode; none for a
// concurrency slot) or ErrNeverFits.
func (g *RedisGovernor) TryAcquire(r RedisRequest) (*RedisPermit, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var handle *C.llmgov_redis_permit
	err = call(func() C.llmgov_result {
		return C.llmgov_redis_governor_try_acquire(h, C.uint64_t(r.Route), C.uint64_t(r.InputTokens),
			C.uint64_t(r.CachedInputTokens), C.uint64_t(r.MaxOutputTokens), &handle)
	})
	if err != nil {
		return nil, err
	}
	return newRedisPermit(handle), nil
}

// Acquire is TryAcquire, waiting while a limit refuses: it sleeps until
// the refusing limit could admit the request and tries again (Redis keeps
// no queue: whoever tries first after capacity returns takes it). ctx's
// deadline bounds the wait on the governor's clock: ErrDeadlineExceeded,
// at once when the predicted wait is already longer. ErrNeverFits is
// returned at once. If ctx is cancelled first, Acquire returns promptly
// with an error wrapping both ctx's error and ErrCancelled, holding
// nothing. The wait occupies the calling goroutine's OS thread.
func (g *RedisGovernor) Acquire(ctx context.Context, r RedisRequest) (*RedisPermit, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	timeout := timeoutOf(ctx)
	var handle *C.llmgov_redis_permit
	acquire := func(token *C.llmgov_cancel_token) error {
		return call(func() C.llmgov_result {
			return C.llmgov_redis_governor_acquire(h, C.uint64_t(r.Route), C.uint64_t(r.InputTokens),
				C.uint64_t(r.CachedInputTokens), C.uint64_t(r.MaxOutputTokens), timeout, token, &handle)
		})
	}
	if ctx.Done() == nil { // cannot be cancelled
		err = acquire(nil)
	} else {
		err = acquireCancellable(ctx, acquire)
	}
	if err != nil {
		return nil, err
	}
	return newRedisPermit(handle), nil
}

// Health is the governor's link to Redis now.
func (g *RedisGovernor) Health() (*RedisHealth, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_redis_governor_health_json(h, &out) })
	return decoded[RedisHealth](takeString(out, err))
}

// ReturnLeases gives every lease's unused part back to Redis now (leased
// mode), as Close does with the last permit.
func (g *RedisGovernor) ReturnLeases() error {
	h, err := g.ptr()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(g)
	return call(func() C.llmgov_result { return C.llmgov_redis_governor_return_leases(h) })
}

// Heartbeat refreshes every concurrency slot this process holds in Redis
// now (a background thread does it every third of redis.slot_ttl).
func (g *RedisGovernor) Heartbeat() error {
	h, err := g.ptr()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(g)
	return call(func() C.llmgov_result { return C.llmgov_redis_governor_heartbeat(h) })
}

// RedisPermit is a reservation granted by a RedisGovernor: settle it with
// the actual usage, or cancel it if the request was never sent. Safe for
// concurrent use. A permit dropped while pending stays charged, and its
// concurrency slot taken, until the permit TTL and then the slot TTL pass.
type RedisPermit struct {
	mu      sync.Mutex
	handle  *C.llmgov_redis_permit
	closed  bool
	cleanup runtime.Cleanup
}

func newRedisPermit(handle *C.llmgov_redis_permit) *RedisPermit {
	p := &RedisPermit{handle: handle}
	p.cleanup = runtime.AddCleanup(p, func(h *C.llmgov_redis_permit) { C.llmgov_redis_permit_free(h) }, handle)
	return p
}

func (p *RedisPermit) locked(f func(h *C.llmgov_redis_permit) error) error {
	if p == nil {
		return errNil("permit", redisPermitMakers)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle == nil {
		if p.closed {
			return errClosed("permit")
		}
		return errNil("permit", redisPermitMakers)
	}
	return f(p.handle)
}

// Settle reconciles the permit with the actual usage: refunds what was
// over-reserved, charges any overage, frees its concurrency slots. A
// permit reconciles once: again is ErrPermitFinished; after its TTL,
// ErrPermitExpired. A usage out of range is ErrInvalidRequest naming the
// field, and the permit stays pending.
func (p *RedisPermit) Settle(u Usage) error {
	return p.locked(func(h *C.llmgov_redis_permit) error {
		return call(func() C.llmgov_result { return C.llmgov_redis_permit_settle(h, u.c()) })
	})
}

// Cancel gives the whole reservation back: for a request never sent.
func (p *RedisPermit) Cancel() error {
	return p.locked(func(h *C.llmgov_redis_permit) error {
		return call(func() C.llmgov_result { return C.llmgov_redis_permit_cancel(h) })
	})
}

// AddOutput reports tokens more of streamed output: output beyond the
// reservation of the route's local scopes is charged there at once, with
// no Redis call; the shared scopes reserved MaxOutputTokens and are charged
// any more at Settle, from the usage.
func (p *RedisPermit) AddOutput(tokens uint64) error {
	return p.locked(func(h *C.llmgov_redis_permit) error {
		return call(func() C.llmgov_result { return C.llmgov_redis_permit_add_output(h, C.uint64_t(tokens)) })
	})
}

// Report feeds the provider's answer to this permit's request (status,
// headers, body) back into the local scopes of its route, as Permit.Report
// does, and says how it was read: a 429 holds the local scope it names
// empty until the retry-after, AIMD and the breaker learn, remaining
// headers lower buckets. A 429 also holds the route's shared provider
// scopes empty in Redis, for every process, until its retry-after (one
// Redis call per such scope), and so does a circuit breaker the answer
// opens there, for its pause; other shared scopes learn nothing from it. Call it for successes too, before or after settling or
// cancelling. A status outside 100 to 999 is ErrInvalidRequest naming
// "status", and nothing is fed back.
func (p *RedisPermit) Report(status int, header http.Header, body []byte) (Classification, error) {
	return report(p.locked, status, header, body, func(h *C.llmgov_redis_permit, a *cAnswer) C.llmgov_result {
		return C.llmgov_redis_permit_report(h, a.status, a.headers, a.headersLen, a.body, a.bodyLen, a.out)
	})
}

// FromFallback says whether the permit's shared part came from the safe
// local share (Redis was away when it was granted).
func (p *RedisPermit) FromFallback() (bool, error) {
	var fallback C.bool
	err := p.locked(func(h *C.llmgov_redis_permit) error {
		return call(func() C.llmgov_result { return C.llmgov_redis_permit_from_fallback(h, &fallback) })
	})
	return bool(fallback), err
}

// Close frees the permit's C memory now. A pending permit is not refunded
// (cancel it first if the request was abandoned). Later calls return
// ErrClosed; Close again does nothing.
func (p *RedisPermit) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle != nil {
		p.cleanup.Stop()
		C.llmgov_redis_permit_free(p.handle)
		p.handle, p.closed = nil, true
	}
}

// SnapshotJSON is the local scopes (those not shared) and their counters
// now, as the core's JSON. Shared scopes live in Redis and are not in it.
func (g *RedisGovernor) SnapshotJSON() ([]byte, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_redis_governor_snapshot_json(h, &out) })
	return takeString(out, err)
}

// Snapshot is SnapshotJSON decoded.
func (g *RedisGovernor) Snapshot() (*Snapshot, error) {
	return decoded[Snapshot](g.SnapshotJSON())
}

// MetricsJSON is the local engine's metrics as the core's JSON (what
// `llmgov top` draws): the scopes not shared, their refusals and estimate
// errors. Refusals by shared scopes are Redis's and are not counted here.
func (g *RedisGovernor) MetricsJSON() ([]byte, error) {
	h, err := g.ptr()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var out *C.char
	err = call(func() C.llmgov_result { return C.llmgov_redis_governor_metrics_json(h, &out) })
	return takeString(out, err)
}

// Metrics is MetricsJSON decoded.
func (g *RedisGovernor) Metrics() (*Metrics, error) {
	return decoded[Metrics](g.MetricsJSON())
}
