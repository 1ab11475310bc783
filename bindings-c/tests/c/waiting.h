/* For the C tests that queue requests on other threads: a thread blocked
 * in llmgov_governor_acquire, and a wait until the governor's queues hold
 * a given number of waiters. */
#ifndef LLMGOV_TEST_WAITING_H
#define LLMGOV_TEST_WAITING_H

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* A thread blocked in llmgov_governor_acquire. */
typedef struct {
    const llmgov_governor *gov;
    llmgov_request request;
    pthread_t thread;
    llmgov_result result;
    llmgov_permit *permit;
} waiter;

static inline void *wait_for_admission(void *arg) {
    waiter *w = arg;
    w->result = llmgov_governor_acquire(w->gov, &w->request, LLMGOV_NO_TIMEOUT, &w->permit);
    return NULL;
}

/* Yields until `depth` requests wait: the waiter threads have queued. */
static inline void until_waiting(const llmgov_governor *gov, int depth) {
    char expected[32];
    snprintf(expected, sizeof expected, "{\"depth\":%d", depth);
    for (;;) {
        char *json = NULL;
        CHECK_OK(llmgov_governor_queue_metrics_json(gov, &json));
        int found = json != NULL && strncmp(json, expected, strlen(expected)) == 0;
        llmgov_string_free(json);
        if (found) return;
        sched_yield();
    }
}

#endif
