/* One governor, many threads: admissions never exceed the limit, and each
 * thread reads its own last error. */
#include <pthread.h>
#include <stdint.h>

#include "check.h"

#define THREADS 4
#define ATTEMPTS 500
#define LIMIT 1000

typedef struct {
    const llmgov_governor *gov;
    uint64_t route;
    int admitted;
    int refused;
    int wrong_detail;
} worker;

static void *run(void *arg) {
    worker *w = arg;
    llmgov_request request = {0};
    request.route = w->route;
    for (int i = 0; i < ATTEMPTS; i++) {
        llmgov_permit *permit = NULL;
        llmgov_result r = llmgov_governor_try_acquire(w->gov, &request, &permit);
        if (r == LLMGOV_RESULT_OK) {
            w->admitted++;
            /* Settled at once: the requests limit keeps the charge. */
            if (llmgov_permit_settle(permit, (llmgov_usage){0, 0, 0}) != LLMGOV_RESULT_OK) w->wrong_detail++;
            llmgov_permit_free(permit);
        } else {
            w->refused++;
            llmgov_error e;
            if (llmgov_last_error(&e) != LLMGOV_RESULT_OK || e.result != LLMGOV_RESULT_RATE_LIMITED ||
                !same(e.scope, "shared") || e.dimension != LLMGOV_DIMENSION_REQUESTS || !e.has_retry_after) {
                w->wrong_detail++;
            }
        }
    }
    return NULL;
}

int main(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml(
        "[scopes.shared]\nlimits = [{ dimension = \"requests\", amount = 1000, window = \"1h\" }]\n", clock, &gov));
    const char *path = "shared";
    uint64_t route = 0;
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &route));

    worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (worker){gov, route, 0, 0, 0};
        CHECK(pthread_create(&threads[t], NULL, run, &workers[t]) == 0);
    }
    int admitted = 0, refused = 0, wrong = 0;
    for (int t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0);
        admitted += workers[t].admitted;
        refused += workers[t].refused;
        wrong += workers[t].wrong_detail;
    }
    /* The clock stood still: exactly the limit passed, the rest were refused. */
    CHECK(admitted == LIMIT);
    CHECK(refused == THREADS * ATTEMPTS - LIMIT);
    CHECK(wrong == 0);
    /* The main thread never failed: its last error is its own. */
    CHECK(last_error().result == LLMGOV_RESULT_OK);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
    return finish("c-threads");
}
