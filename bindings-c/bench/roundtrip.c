/* try_acquire + settle (+ free) through the C ABI, on a manual clock that
 * stands still. Prints the median of 7 runs in ns per round trip.
 * Run: make bench-c */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "llmgov.h"
#include "shapes.h"

#define RUNS 7
#define ITERATIONS 1000000

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench(const char *name, const char *config, const char *path) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    llmgov_request request = {0};
    if (llmgov_governor_from_json(config, clock, &gov) != LLMGOV_RESULT_OK ||
        llmgov_governor_route(gov, &path, 1, &request.route) != LLMGOV_RESULT_OK) {
        llmgov_error e;
        llmgov_last_error(&e);
        fprintf(stderr, "%s: %s\n", name, e.message);
        return 1;
    }
    request.input_tokens = 1200;
    request.max_output_tokens = 400;
    const llmgov_usage usage = {1200, 0, 250};
    double per_op[RUNS];
    for (int run = -1; run < RUNS; run++) { /* run -1 warms up */
        double start = now_ns();
        for (int i = 0; i < ITERATIONS; i++) {
            llmgov_permit *permit;
            if (llmgov_governor_try_acquire(gov, &request, &permit) != LLMGOV_RESULT_OK ||
                llmgov_permit_settle(permit, usage) != LLMGOV_RESULT_OK) {
                fprintf(stderr, "%s: refused at %d\n", name, i);
                return 1;
            }
            llmgov_permit_free(permit);
        }
        if (run >= 0) per_op[run] = (now_ns() - start) / ITERATIONS;
    }
    qsort(per_op, RUNS, sizeof per_op[0], compare);
    printf("c/try_acquire_settle/%s: %.1f ns (median of %d runs of %d; min %.1f, max %.1f)\n", name, per_op[RUNS / 2],
           RUNS, ITERATIONS, per_op[0], per_op[RUNS - 1]);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
    return 0;
}

int main(void) {
    return bench("1x1", SHAPE_1X1, PATH_1X1) || bench("6x4", SHAPE_6X4, PATH_6X4);
}
