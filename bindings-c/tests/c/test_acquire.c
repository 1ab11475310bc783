/* Blocking acquire through the C ABI, on a manual clock: a waiter is
 * admitted when the clock reaches the refill, deadlines and timeouts are
 * refused at once when the predicted wait is longer, a full class queue
 * refuses, and a refused wait holds nothing. */
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "waiting.h"

#define SECOND 1000000000ull

/* 600 tokens a minute: 10 a second. The batch class holds one waiter. */
static const char *CONFIG =
    "[scopes.\"p\"]\n"
    "limits = [{ dimension = \"tokens\", amount = 600, window = \"1m\" }]\n"
    "[classes.batch]\n"
    "queue_bound = 1\n";

static int64_t in_use(const llmgov_governor *gov) {
    char *json = NULL;
    if (llmgov_governor_snapshot_json(gov, &json) != LLMGOV_RESULT_OK) return -1;
    const char *at = strstr(json, "\"in_use\":");
    int64_t n = at ? strtoll(at + 9, NULL, 10) : -1;
    llmgov_string_free(json);
    return n;
}

int main(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, clock, &gov));
    const char *path = "p";
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &request.route));

    /* Fits: admitted at once, without waiting. */
    request.input_tokens = 600;
    llmgov_permit *all = NULL;
    CHECK_OK(llmgov_governor_acquire(gov, &request, LLMGOV_NO_TIMEOUT, &all));
    CHECK(in_use(gov) == 600);

    /* 100 more would wait 10 s: a 1 s timeout is refused at once. */
    request.input_tokens = 100;
    llmgov_permit *permit = (llmgov_permit *)0x1;
    CHECK_RESULT(llmgov_governor_acquire(gov, &request, 1 * SECOND, &permit), LLMGOV_RESULT_DEADLINE_EXCEEDED);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "deadline_exceeded");
    CHECK(e.waited_ns == 0);
    CHECK(e.has_retry_after && e.retry_after_ms == 10000);
    CHECK(permit == (llmgov_permit *)0x1);
    CHECK(in_use(gov) == 600); /* nothing taken */
    /* The request's own deadline likewise. */
    request.has_deadline = true;
    request.deadline_ns = 2 * SECOND;
    CHECK_RESULT(llmgov_governor_acquire(gov, &request, LLMGOV_NO_TIMEOUT, &permit), LLMGOV_RESULT_DEADLINE_EXCEEDED);
    request.has_deadline = false;
    /* Waiting can never help a request above the burst. */
    request.input_tokens = 601;
    CHECK_RESULT(llmgov_governor_acquire(gov, &request, LLMGOV_NO_TIMEOUT, &permit), LLMGOV_RESULT_NEVER_FITS);

    /* A waiter in the batch class: admitted when the clock reaches the refill. */
    waiter w = {.gov = gov, .request = request, .result = LLMGOV_RESULT_PANIC};
    w.request.input_tokens = 100;
    CHECK_OK(llmgov_governor_class(gov, "batch", &w.request.class_id));
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_for_admission, &w) == 0);
    until_waiting(gov, 1);

    /* The batch queue holds one: the next batch request is refused at once. */
    llmgov_request second = w.request;
    CHECK_RESULT(llmgov_governor_acquire(gov, &second, LLMGOV_NO_TIMEOUT, &permit), LLMGOV_RESULT_QUEUE_FULL);
    e = last_error();
    CHECK_STR(e.field, "class");
    CHECK_STR(e.value, "batch");
    CHECK(permit == (llmgov_permit *)0x1);

    uint64_t next = 0;
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    CHECK(next == 10 * SECOND);
    CHECK_OK(llmgov_manual_clock_advance(clock, 10 * SECOND - 1));
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    CHECK(next == 1);
    CHECK_OK(llmgov_manual_clock_advance(clock, 1));
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    CHECK(next == UINT64_MAX); /* nobody waits on time any more */
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(w.result == LLMGOV_RESULT_OK && w.permit != NULL);
    CHECK(in_use(gov) == 600); /* 500 left after 10 s, then the waiter's 100 */
    char *json = NULL;
    CHECK_OK(llmgov_governor_queue_metrics_json(gov, &json));
    CHECK_CONTAINS(json, "\"longest_admitted_wait_ms\":10000");
    llmgov_string_free(json);

    /* NULLs. */
    CHECK_RESULT(llmgov_governor_acquire(NULL, &request, 0, &permit), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(llmgov_governor_acquire(gov, NULL, 0, &permit), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(llmgov_governor_acquire(gov, &request, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_permit");
    CHECK_RESULT(llmgov_governor_wake_waiters(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(llmgov_governor_queue_metrics_json(NULL, &json), LLMGOV_RESULT_NULL_ARGUMENT);

    CHECK_OK(llmgov_permit_settle(w.permit, (llmgov_usage){100, 0, 0}));
    CHECK_OK(llmgov_permit_cancel(all));
    llmgov_permit_free(w.permit);
    llmgov_permit_free(all);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
    return finish("c-acquire");
}
