#include "shim.h"

#include "_cgo_export.h"

#include <stdlib.h>
#include <string.h>

static char *copy(const char *s) {
    return s == NULL ? NULL : strdup(s);
}

void go_error_take(llmgov_result result, go_error *out) {
    memset(out, 0, sizeof *out);
    if (llmgov_last_error(&out->e) != LLMGOV_RESULT_OK || out->e.result != result) {
        /* Cannot happen: the call that failed set it. Keep the code. */
        out->e.result = result;
        out->e.code = llmgov_result_code(result);
        out->e.message = llmgov_result_message(result);
    }
    out->code = copy(out->e.code);
    out->message = copy(out->e.message);
    out->scope = copy(out->e.scope);
    out->field = copy(out->e.field);
    out->value = copy(out->e.value);
}

void go_error_free(go_error *e) {
    free(e->code);
    free(e->message);
    free(e->scope);
    free(e->field);
    free(e->value);
}

static llmgov_result checked(llmgov_result result, go_error *err) {
    if (result != LLMGOV_RESULT_OK) go_error_take(result, err);
    return result;
}

/* Events met while this thread is in a nocallback call, kept for Go. */
static _Thread_local struct {
    int holding;
    char *text;
    size_t len, cap;
} held;

static void hold_events(void) {
    held.holding = 1;
}

/* Hands the held events to `err` (after go_error_take, which clears it). */
static void give_events(go_error *err) {
    held.holding = 0;
    err->events = held.text;
    err->events_len = held.len;
    held.text = NULL;
    held.len = held.cap = 0;
}

/* Keeps one event and its newline; an event that finds no memory is
 * dropped (there is no one to tell). */
static void keep_event(const char *json, size_t len) {
    if (held.len + len + 1 > held.cap) {
        size_t cap = (held.len + len + 1) * 2;
        char *text = realloc(held.text, cap);
        if (text == NULL) return;
        held.text = text;
        held.cap = cap;
    }
    memcpy(held.text + held.len, json, len);
    held.text[held.len + len] = '\n';
    held.len += len + 1;
}

llmgov_result go_try_acquire(const llmgov_governor *governor, const llmgov_request *request, llmgov_permit **out,
                             go_error *err) {
    hold_events();
    llmgov_result result = checked(llmgov_governor_try_acquire(governor, request, out), err);
    give_events(err);
    return result;
}

llmgov_result go_acquire(const llmgov_governor *governor, const llmgov_request *request, uint64_t timeout_ns,
                         llmgov_permit **out, go_error *err) {
    llmgov_result result = checked(llmgov_governor_acquire(governor, request, timeout_ns, out), err);
    err->panic = go_take_panic();
    return result;
}

llmgov_result go_acquire_cancellable(const llmgov_governor *governor, const llmgov_request *request,
                                     uint64_t timeout_ns, const llmgov_cancel_token *cancel, llmgov_permit **out,
                                     go_error *err) {
    llmgov_result result =
        checked(llmgov_governor_acquire_cancellable(governor, request, timeout_ns, cancel, out), err);
    err->panic = go_take_panic();
    return result;
}

llmgov_result go_settle(llmgov_permit *permit, llmgov_usage usage, go_error *err) {
    return checked(llmgov_permit_settle(permit, usage), err);
}

llmgov_result go_cancel(llmgov_permit *permit, go_error *err) {
    return checked(llmgov_permit_cancel(permit), err);
}

llmgov_result go_add_output(llmgov_permit *permit, uint64_t tokens, go_error *err) {
    return checked(llmgov_permit_add_output(permit, tokens), err);
}

llmgov_result go_try_acquire_profile(const llmgov_governor *governor, const llmgov_profile *profile,
                                     const llmgov_request *request, llmgov_permit **out, llmgov_routed *routed,
                                     go_error *err) {
    hold_events();
    llmgov_result result = checked(llmgov_governor_try_acquire_profile(governor, profile, request, out, routed), err);
    give_events(err);
    return result;
}

/* The first panic of the Go callback during this thread's current call
 * (see shim.h), until the Go caller takes it. */
static _Thread_local uintptr_t pending_panic;

uintptr_t go_take_panic(void) {
    uintptr_t caught = pending_panic;
    pending_panic = 0;
    return caught;
}

/* The handle travels as userdata: converting it to a pointer in C keeps Go
 * from seeing an integer turned into an unsafe.Pointer. */
static void go_event_trampoline(void *userdata, const char *event_json, size_t len) {
    if (held.holding) {
        keep_event(event_json, len);
        return;
    }
    if (pending_panic != 0) return; /* the callback panicked in this call: no more */
    pending_panic = llmgovGoEvent((uintptr_t)userdata, (char *)event_json, len);
}

llmgov_result go_set_event_hook(const llmgov_governor *governor, uintptr_t handle) {
    return llmgov_governor_set_event_hook(governor, go_event_trampoline, (void *)handle);
}
