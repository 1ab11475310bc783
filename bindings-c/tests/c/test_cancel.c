/* A blocking acquire cancelled from another thread, on a manual clock: the
 * waiter returns LLMGOV_RESULT_CANCELLED at once and leaves its queue, so
 * nothing is reserved and it is never admitted; an uncancelled one is
 * admitted as by llmgov_governor_acquire; one token cancels every wait on
 * it; bad input names the argument. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define SECOND 1000000000ull

/* 600 tokens a minute: 10 a second. */
static const char *CONFIG =
    "[scopes.\"p\"]\n"
    "limits = [{ dimension = \"tokens\", amount = 600, window = \"1m\" }]\n";

typedef struct {
    const llmgov_governor *gov;
    llmgov_request request;
    const llmgov_cancel_token *token;
    llmgov_result result;
    llmgov_permit *permit;
    char code[32], field[32];
} waiter;

static void *wait_for_admission(void *arg) {
    waiter *w = arg;
    w->result = llmgov_governor_acquire_cancellable(w->gov, &w->request, LLMGOV_NO_TIMEOUT, w->token, &w->permit);
    if (w->result != LLMGOV_RESULT_OK) {
        llmgov_error e;
        if (llmgov_last_error(&e) == LLMGOV_RESULT_OK) {
            snprintf(w->code, sizeof w->code, "%s", e.code);
            snprintf(w->field, sizeof w->field, "%s", e.field ? e.field : "");
        }
    }
    return NULL;
}

static long json_number(const llmgov_governor *gov, int queue, const char *key) {
    char *json = NULL;
    llmgov_result r = queue ? llmgov_governor_queue_metrics_json(gov, &json) : llmgov_governor_snapshot_json(gov, &json);
    if (r != LLMGOV_RESULT_OK) return -1;
    const char *at = strstr(json, key);
    long n = at ? strtol(at + strlen(key), NULL, 10) : -1;
    llmgov_string_free(json);
    return n;
}

static long depth(const llmgov_governor *gov) { return json_number(gov, 1, "{\"depth\":"); }
static long in_use(const llmgov_governor *gov) { return json_number(gov, 0, "\"in_use\":"); }
static long admitted(const llmgov_governor *gov) { return json_number(gov, 0, "\"admitted\":"); }

static void until_depth(const llmgov_governor *gov, long n) {
    while (depth(gov) != n) sched_yield();
}

int main(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, clock, &gov));
    const char *path = "p";
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &request.route));
    request.input_tokens = 600;
    llmgov_permit *all = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &all));
    request.input_tokens = 100;

    /* Two waiters on one token: both queue, one cancel releases both. */
    llmgov_cancel_token *token = llmgov_cancel_token_new();
    waiter a = {gov, request, token, LLMGOV_RESULT_OK, NULL, "", ""};
    waiter b = a;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, wait_for_admission, &a);
    pthread_create(&tb, NULL, wait_for_admission, &b);
    until_depth(gov, 2);
    CHECK_OK(llmgov_cancel_token_cancel(token));
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.result == LLMGOV_RESULT_CANCELLED && b.result == LLMGOV_RESULT_CANCELLED);
    CHECK(a.permit == NULL && b.permit == NULL);
    CHECK_STR(a.code, "cancelled");
    CHECK_STR(a.field, "cancel");
    CHECK(depth(gov) == 0); /* left the queue at once */
    CHECK(in_use(gov) == 600);
    /* At the refill, nobody left behind is admitted. */
    CHECK_OK(llmgov_manual_clock_advance(clock, 10 * SECOND));
    uint64_t next = 0;
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    CHECK(admitted(gov) == 1);

    /* A token already cancelled refuses at once, without queueing. */
    llmgov_permit *permit = (llmgov_permit *)0x1;
    CHECK_RESULT(llmgov_governor_acquire_cancellable(gov, &request, LLMGOV_NO_TIMEOUT, token, &permit),
                 LLMGOV_RESULT_CANCELLED);
    CHECK(permit == (llmgov_permit *)0x1);
    CHECK_CONTAINS(last_error().message, "cancel");
    CHECK(admitted(gov) == 1);
    llmgov_cancel_token_free(token);

    /* Not cancelled: admitted at the refill as by llmgov_governor_acquire. */
    CHECK_OK(llmgov_manual_clock_advance(clock, 60 * SECOND));
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    request.input_tokens = 600;
    llmgov_permit *full = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &full));
    request.input_tokens = 100;
    token = llmgov_cancel_token_new();
    waiter c = {gov, request, token, LLMGOV_RESULT_OK, NULL, "", ""};
    pthread_t tc;
    pthread_create(&tc, NULL, wait_for_admission, &c);
    until_depth(gov, 1);
    CHECK_OK(llmgov_manual_clock_advance(clock, 10 * SECOND));
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    pthread_join(tc, NULL);
    CHECK(c.result == LLMGOV_RESULT_OK && c.permit != NULL);
    CHECK_OK(llmgov_permit_settle(c.permit, (llmgov_usage){100, 0, 0}));
    llmgov_permit_free(c.permit);

    /* The timeout still bounds the wait: 100 tokens more need 10 s. */
    CHECK_RESULT(llmgov_governor_acquire_cancellable(gov, &request, 1 * SECOND, token, &permit),
                 LLMGOV_RESULT_DEADLINE_EXCEEDED);
    llmgov_error e = last_error();
    CHECK(e.has_retry_after && e.retry_after_ms == 10000);
    CHECK(depth(gov) == 0);

    /* Bad input names the argument. */
    CHECK_RESULT(llmgov_governor_acquire_cancellable(gov, &request, LLMGOV_NO_TIMEOUT, NULL, &permit),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "cancel");
    CHECK_RESULT(llmgov_governor_acquire_cancellable(gov, &request, LLMGOV_NO_TIMEOUT, token, NULL),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_permit");
    CHECK_RESULT(llmgov_governor_acquire_cancellable(NULL, &request, LLMGOV_NO_TIMEOUT, token, &permit),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK_RESULT(llmgov_governor_acquire_cancellable(gov, NULL, LLMGOV_NO_TIMEOUT, token, &permit),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "request");
    request.class_id = 99;
    CHECK_RESULT(llmgov_governor_acquire_cancellable(gov, &request, LLMGOV_NO_TIMEOUT, token, &permit),
                 LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "class_id");
    CHECK_STR(e.value, "99");
    request.class_id = 0;
    CHECK_RESULT(llmgov_cancel_token_cancel(NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "token");
    CHECK_STR(llmgov_result_code(LLMGOV_RESULT_CANCELLED), "cancelled");
    CHECK(permit == (llmgov_permit *)0x1);

    llmgov_cancel_token_free(token);
    llmgov_cancel_token_free(NULL);
    llmgov_permit_free(full);
    llmgov_permit_free(all);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
    return finish("cancel");
}
