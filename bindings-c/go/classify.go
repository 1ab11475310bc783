package llmgov

/*
#include <stdlib.h>
#include <string.h>
#include "llmgov.h"
*/
import "C"

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unsafe"
)

// LimitKind is why a provider refused, as far as waiting is concerned:
// "none", "rate_limited", "quota_exhausted", "overloaded" or "too_large".
type LimitKind string

var limitKinds = [...]LimitKind{"none", "rate_limited", "quota_exhausted", "overloaded", "too_large"}

// LimitDimension is what a provider's limit counts: "requests", "tokens",
// "input_tokens", "output_tokens", "concurrency", "daily_requests",
// "daily_tokens" or "unknown".
type LimitDimension string

var limitDimensions = [C.LLMGOV_LIMIT_DIMENSIONS]LimitDimension{
	"requests", "tokens", "input_tokens", "output_tokens", "concurrency", "daily_requests", "daily_tokens", "unknown",
}

// Provider is which provider answered; ProviderAuto infers it.
type Provider uint32

// The providers.
const (
	ProviderAuto Provider = iota
	ProviderOpenAI
	ProviderAzure
	ProviderGroq
	ProviderAnthropic
	ProviderGemini
	ProviderBedrock
	ProviderMistral
	ProviderOpenRouter
	ProviderDeepSeek
	ProviderTogether
	ProviderCohere
)

// Classification is everything one provider answer says about limits.
type Classification struct {
	// Limited: a limit, quota, overload or size cap refused the request.
	Limited bool
	Kind    LimitKind
	// Dimension is the refusing limit; "unknown" when not said.
	Dimension LimitDimension
	// RetryAfter is how long to wait before retrying, when HasRetryAfter;
	// one longer than a Duration holds (a date centuries ahead) is the
	// longest Duration, math.MaxInt64. So are Reset's.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Retryable: retrying (after RetryAfter) can succeed.
	Retryable bool
	Provider  Provider
	// Remaining, Limit and Reset hold what the answer reported of each
	// limit: what is left, its size, and the time until it resets.
	Remaining map[LimitDimension]uint64
	Limit     map[LimitDimension]uint64
	Reset     map[LimitDimension]time.Duration
}

func classificationFromC(c *C.llmgov_classification) Classification {
	out := Classification{
		Limited:       bool(c.limited),
		Kind:          limitKinds[min(int(c.kind), len(limitKinds)-1)],
		Dimension:     limitDimensions[min(int(c.dimension), len(limitDimensions)-1)],
		HasRetryAfter: bool(c.has_retry_after),
		RetryAfter:    millis(c.retry_after_ms),
		Retryable:     bool(c.retryable),
		Provider:      Provider(c.provider),
		Remaining:     map[LimitDimension]uint64{},
		Limit:         map[LimitDimension]uint64{},
		Reset:         map[LimitDimension]time.Duration{},
	}
	for i, d := range limitDimensions {
		if c.has_remaining[i] {
			out.Remaining[d] = uint64(c.remaining[i])
		}
		if c.has_limit[i] {
			out.Limit[d] = uint64(c.limit[i])
		}
		if c.has_reset[i] {
			out.Reset[d] = millis(c.reset_ms[i])
		}
	}
	return out
}

// cHeaders copies headers into C memory (the array holds pointers, so it
// cannot be Go memory); free releases it. An empty name or value crosses
// as NULL with length 0, as llmgov_header allows. Nothing here can panic
// between the allocations and the return of free, so no path leaks them.
func cHeaders(header http.Header) (*C.llmgov_header, C.size_t, func()) {
	pairs, size := 0, 0
	for name, values := range header {
		pairs += len(values)
		for _, v := range values {
			size += len(name) + len(v)
		}
	}
	if pairs == 0 {
		return nil, 0, func() {}
	}
	array := unsafe.Slice((*C.llmgov_header)(C.calloc(C.size_t(pairs), C.sizeof_llmgov_header)), pairs)
	var bytes []byte // nil when every name and value is empty
	if size > 0 {
		bytes = unsafe.Slice((*byte)(C.malloc(C.size_t(size))), size)
	}
	i, at := 0, 0
	put := func(s string) (*C.uint8_t, C.size_t) {
		n := copy(bytes[at:], s)
		if n == 0 {
			return nil, 0
		}
		p := (*C.uint8_t)(unsafe.Pointer(&bytes[at]))
		at += n
		return p, C.size_t(n)
	}
	for name, values := range header {
		for _, v := range values {
			if i == pairs { // only if header changed under us (a data race)
				break
			}
			array[i].name, array[i].name_len = put(name)
			array[i].value, array[i].value_len = put(v)
			i++
		}
	}
	return &array[0], C.size_t(i), func() {
		C.free(unsafe.Pointer(&array[0]))
		C.free(unsafe.Pointer(unsafe.SliceData(bytes)))
	}
}

// cAnswer is a provider's answer in the form a C report function takes,
// with where it writes the classification. The headers are C memory,
// freed when the report returns.
type cAnswer struct {
	status     C.uint16_t
	headers    *C.llmgov_header
	headersLen C.size_t
	body       *C.uint8_t
	bodyLen    C.size_t
	out        *C.llmgov_classification
}

// report is Permit.Report and RedisPermit.Report: the status checked, then,
// under the permit's locked (nil, zero and closed permits are errors), the
// headers copied for C and cReport (the permit's C report function) called
// with the answer; the classification it fills is decoded.
func report[H any](locked func(func(H) error) error, status int, header http.Header, body []byte,
	cReport func(H, *cAnswer) C.llmgov_result) (Classification, error) {
	if err := checkStatus(status); err != nil {
		return Classification{}, err
	}
	var out C.llmgov_classification
	err := locked(func(h H) error {
		headers, n, free := cHeaders(header)
		defer free()
		a := cAnswer{C.uint16_t(status), headers, n, bytesPtr(body), C.size_t(len(body)), &out}
		return call(func() C.llmgov_result { return cReport(h, &a) })
	})
	if err != nil {
		return Classification{}, err
	}
	return classificationFromC(&out), nil
}

// checkStatus refuses what is no HTTP status, as the C library (and
// Python and Node) do; it also keeps an int from being cut to uint16.
func checkStatus(status int) error {
	if status < 100 || status > 999 {
		return invalidRequest("status", strconv.Itoa(status), "must be an HTTP status from 100 to 999")
	}
	return nil
}

// ClassifyResponse reads a provider's answer without touching any
// governor (Permit.Report also feeds it back). now is the wall-clock time,
// for resets given as dates. Any bytes are read without error.
func ClassifyResponse(status int, header http.Header, body []byte, provider Provider, now time.Time) (Classification, error) {
	if err := checkStatus(status); err != nil {
		return Classification{}, err
	}
	headers, n, free := cHeaders(header)
	defer free()
	var out C.llmgov_classification
	err := call(func() C.llmgov_result {
		return C.llmgov_response_classify(C.uint16_t(status), headers, n, bytesPtr(body), C.size_t(len(body)),
			C.uint32_t(provider), C.uint64_t(max(now.UnixMilli(), 0)), &out)
	})
	if err != nil {
		return Classification{}, err
	}
	return classificationFromC(&out), nil
}

// ClassifyResponseJSON is ClassifyResponse as the core's JSON:
// {"limited", "kind", "dimension", "retry_after_ms", "remaining", "limit",
// "reset_ms", "retryable", "provider", "status"}.
func ClassifyResponseJSON(status int, header http.Header, body []byte, provider Provider, now time.Time) ([]byte, error) {
	if err := checkStatus(status); err != nil {
		return nil, err
	}
	headers, n, free := cHeaders(header)
	defer free()
	var out *C.char
	err := call(func() C.llmgov_result {
		return C.llmgov_response_classify_json(C.uint16_t(status), headers, n, bytesPtr(body), C.size_t(len(body)),
			C.uint32_t(provider), C.uint64_t(max(now.UnixMilli(), 0)), &out)
	})
	return takeString(out, err)
}

// takeString copies a string llmgov handed out and frees it.
func takeString(s *C.char, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer C.llmgov_string_free(s)
	return C.GoBytes(unsafe.Pointer(s), C.int(C.strlen(s))), nil
}

// decoded is the JSON text llmgov gave (or its error) decoded into a T.
func decoded[T any](text []byte, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	var value T
	if err := json.Unmarshal(text, &value); err != nil {
		return nil, err
	}
	return &value, nil
}
