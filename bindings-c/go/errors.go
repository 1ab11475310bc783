package llmgov

/*
// Reading and freeing an error keeps no pointer and calls no Go, so the
// error struct can stay on the caller's stack.
#cgo noescape go_error_take
#cgo nocallback go_error_take
#cgo noescape go_error_free
#cgo nocallback go_error_free
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Code is a stable result code of libllmgov (llmgov_result). Each non-zero
// code is an error, so errors.Is(err, llmgov.ErrRateLimited) tests for it.
type Code uint32

// The codes. 1 to 99 mirror the Rust core's Error::code(); 100 and up are
// the C binding's own.
const (
	ErrRateLimited      Code = 1   // refused for now: retry after Error.RetryAfter
	ErrNeverFits        Code = 2   // refused for good: the request exceeds a limit's burst
	ErrInvalidConfig    Code = 3   // a config field is wrong (Error.Field, Error.Value)
	ErrInvalidPath      Code = 4   // a scope path is malformed
	ErrUnknownScope     Code = 5   // no configured scope or template covers the path
	ErrUnknownPreset    Code = 6   // no preset has this name
	ErrInvalidRequest   Code = 7   // a request field is out of range
	ErrPermitFinished   Code = 8   // the permit was already settled or cancelled
	ErrPermitExpired    Code = 9   // the permit outlived its TTL
	ErrDeadlineExceeded Code = 10  // not admitted within the deadline (Error.Waited, Error.RetryAfter)
	ErrQueueFull        Code = 11  // the class's queue is full (Error.Value is the class)
	ErrCircuitOpen      Code = 12  // a provider scope's breaker is open (Error.Scope, Error.RetryAfter)
	ErrNullArgument     Code = 100 // a required handle was nil (Error.Field names it)
	ErrInvalidUTF8      Code = 101 // a string is not valid UTF-8
	ErrInvalidArg       Code = 102 // an argument is out of its domain
	ErrPanic            Code = 103 // the library panicked (please report it)
	ErrCancelled        Code = 104 // a wait was cancelled (Acquire's ctx); nothing was reserved
	ErrUnknown          Code = 199 // an error newer than this binding (Error.CodeName says which)
)

// Name is the code's stable text, as the core's Error::code() spells it
// ("rate_limited").
func (c Code) Name() string {
	return C.GoString(C.llmgov_result_code(C.uint32_t(c)))
}

// Error describes the code, for errors.Is targets and logs.
func (c Code) Error() string {
	return "llmgov: " + c.Name()
}

// ErrClosed is what the methods of a closed Governor, Permit, Profile or
// ManualClock fail with: an *Error with code ErrInvalidArg naming the
// handle ("governor", "permit", …) and Value "closed", for which
// errors.Is(err, ErrClosed) holds.
var ErrClosed = errors.New("llmgov: closed")

// Dimension is what a limit counts: "requests", "input_tokens",
// "output_tokens", "tokens", "concurrency" or "cost".
type Dimension string

var dimensions = [...]Dimension{"", "requests", "input_tokens", "output_tokens", "tokens", "concurrency", "cost"}

// Error is a failure of libllmgov with its details. It unwraps to its
// Code.
type Error struct {
	Code Code
	// CodeName is the stable text code; for ErrUnknown, the core's own.
	CodeName string
	// Message names the field and the value at fault, or the scope and the
	// dimension that refused.
	Message string
	// Scope is the scope that refused (rate_limited, never_fits) or the
	// path at fault (invalid_path, unknown_scope).
	Scope string
	// Field and Value name what was wrong (invalid_config,
	// invalid_request, argument errors).
	Field, Value string
	// Dimension is the refusing limit's (rate_limited, never_fits).
	Dimension Dimension
	// RetryAfter is the earliest time from now the limit could pass, when
	// HasRetryAfter (at most math.MaxInt64, the longest Duration); a
	// concurrency refusal waits on a release instead.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Cost and Burst: for never_fits, what the request costs on the limit
	// and the most the limit can ever hold.
	Cost, Burst uint64
	// Waited is how long a deadline_exceeded request waited (0 when
	// refused at once).
	Waited time.Duration
	// closed: the handle named by Field was closed (see ErrClosed).
	closed bool
}

func (e *Error) Error() string { return "llmgov: " + e.Message }

// Is makes errors.Is(err, ErrClosed) hold for a closed handle's error
// (which unwraps to its Code, ErrInvalidArg).
func (e *Error) Is(target error) bool { return e.closed && target == ErrClosed }

// Unwrap gives the code, so errors.Is(err, llmgov.ErrRateLimited) works.
func (e *Error) Unwrap() error { return e.Code }

// RetryAfterMillis is RetryAfter rounded up to whole milliseconds: waiting
// that long always suffices.
func (e *Error) RetryAfterMillis() uint64 {
	return uint64((e.RetryAfter + time.Millisecond - 1) / time.Millisecond)
}

// fromC converts a failure copied out by the shim, and frees the copy.
func fromC(result C.llmgov_result, ce *C.go_error) error {
	if result == C.LLMGOV_RESULT_OK {
		return nil
	}
	defer C.go_error_free(ce)
	text := func(s *C.char) string {
		if s == nil {
			return ""
		}
		return C.GoString(s)
	}
	e := &Error{
		Code:          Code(result),
		CodeName:      text(ce.code),
		Message:       text(ce.message),
		Scope:         text(ce.scope),
		Field:         text(ce.field),
		Value:         text(ce.value),
		HasRetryAfter: bool(ce.e.has_retry_after),
		RetryAfter:    nanos(ce.e.retry_after_ns),
		Cost:          uint64(ce.e.cost),
		Burst:         uint64(ce.e.burst),
		Waited:        nanos(ce.e.waited_ns),
	}
	if d := int(ce.e.dimension); d < len(dimensions) {
		e.Dimension = dimensions[d]
	}
	return e
}

// call runs one cold-path C call and reads its error on the same thread;
// if an event callback panicked during it, call panics with that value
// (after freeing the error).
func call(f func() C.llmgov_result) error {
	var ce C.go_error
	runtime.LockOSThread()
	result := f()
	if result != C.LLMGOV_RESULT_OK {
		C.go_error_take(result, &ce)
	}
	caught, panicked := takePanic()
	runtime.UnlockOSThread()
	err := fromC(result, &ce)
	if panicked {
		panic(caught)
	}
	return err
}

// invalidRequest is a request field out of range, as the core words it.
func invalidRequest(field, value, reason string) error {
	return &Error{
		Code:     ErrInvalidRequest,
		CodeName: ErrInvalidRequest.Name(),
		Message:  fmt.Sprintf("invalid request: `%s` = `%s`: %s", field, value, reason),
		Field:    field,
		Value:    value,
	}
}

// invalidArg is the binding's own argument error, as the C library words
// it.
func invalidArg(field, value, reason string) error {
	return &Error{
		Code:     ErrInvalidArg,
		CodeName: ErrInvalidArg.Name(),
		Message:  fmt.Sprintf("argument `%s` = `%s`: %s", field, value, reason),
		Field:    field,
		Value:    value,
	}
}
