/* What Go needs beyond llmgov.h: the last error copied out within the same
 * C call that failed (a goroutine may move to another thread between two
 * cgo calls, and the thread-local error may be overwritten there), and the
 * C side of the event callback's bridge to Go.
 *
 * The hot-path calls are `#cgo nocallback` (which spares two allocations
 * per call), so C must not call Go during them: the events they cause (a
 * refused try_acquire's denial) are held, and handed to Go with the result
 * in `go_error.events`, to deliver before the call returns to its caller. */
#ifndef LLMGOV_GO_SHIM_H
#define LLMGOV_GO_SHIM_H

#include "llmgov.h"

/* llmgov_error with its strings copied (malloc); free with go_error_free. */
typedef struct go_error {
    llmgov_error e;
    char *code;
    char *message;
    char *scope;
    char *field;
    char *value;
    /* Events caused by a hot-path call, one JSON object a line (malloc,
     * the caller frees it); NULL if none. */
    char *events;
    size_t events_len;
    /* go_acquire*: a panic of the Go event callback during the call (a
     * cgo.Handle of its value, see go_take_panic); 0 if none. */
    uintptr_t panic;
} go_error;

/* Fills *out from this thread's last error, which failed with `result`. */
void go_error_take(llmgov_result result, go_error *out);
void go_error_free(go_error *e);

/* The hot path: the call and, on failure, its error, in one cgo call.
 * go_try_acquire and go_try_acquire_profile hold their events in
 * err->events; settle, cancel and add_output cause none. */
llmgov_result go_try_acquire(const llmgov_governor *governor, const llmgov_request *request, llmgov_permit **out,
                             go_error *err);
llmgov_result go_acquire(const llmgov_governor *governor, const llmgov_request *request, uint64_t timeout_ns,
                         llmgov_permit **out, go_error *err);
llmgov_result go_acquire_cancellable(const llmgov_governor *governor, const llmgov_request *request,
                                     uint64_t timeout_ns, const llmgov_cancel_token *cancel, llmgov_permit **out,
                                     go_error *err);
llmgov_result go_settle(llmgov_permit *permit, llmgov_usage usage, go_error *err);
llmgov_result go_cancel(llmgov_permit *permit, go_error *err);
llmgov_result go_add_output(llmgov_permit *permit, uint64_t tokens, go_error *err);
llmgov_result go_try_acquire_profile(const llmgov_governor *governor, const llmgov_profile *profile,
                                     const llmgov_request *request, llmgov_permit **out, llmgov_routed *routed,
                                     go_error *err);

/* Routes the governor's events to the Go bridge; `handle` is a cgo.Handle
 * of the bridge, passed back as the callback's userdata.
 *
 * A panic of the Go callback must not unwind through the library's frames
 * (they would be skipped: locks and the callback's own bookkeeping left
 * held). The Go side recovers it and returns a cgo.Handle of its value;
 * the trampoline keeps the first on this thread, delivers no more events
 * of that call, and the Go caller takes it when the call returns and
 * panics again there. */
llmgov_result go_set_event_hook(const llmgov_governor *governor, uintptr_t handle);

/* The panic the Go callback recovered during the last call on this thread,
 * and forgets it; 0 if none. */
uintptr_t go_take_panic(void);

#endif
