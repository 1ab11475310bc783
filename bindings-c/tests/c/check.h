/* A minimal test harness for the C tests: CHECK counts, the closing line
 * says "N passed, N failed", and the exit code is non-zero on a failure. */
#ifndef LLMGOV_CHECK_H
#define LLMGOV_CHECK_H

#include <stdio.h>
#include <string.h>

#include "llmgov.h"

static int checks_passed;
static int checks_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            checks_passed++;                                                     \
        } else {                                                                 \
            checks_failed++;                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

/* Checks that `call` returned `expected`; on a mismatch prints the last
 * error's message. */
#define CHECK_RESULT(call, expected) check_result((call), (expected), #call, __FILE__, __LINE__)
#define CHECK_OK(call) CHECK_RESULT(call, LLMGOV_RESULT_OK)

static inline void check_result(llmgov_result got, llmgov_result expected, const char *call, const char *file, int line) {
    if (got == expected) {
        checks_passed++;
        return;
    }
    checks_failed++;
    llmgov_error e;
    const char *detail = llmgov_last_error(&e) == LLMGOV_RESULT_OK ? e.message : "?";
    fprintf(stderr, "%s:%d: %s returned %s (%u), expected %s: %s\n", file, line, call, llmgov_result_code(got), got,
            llmgov_result_code(expected), detail);
}

/* This thread's last error (the harness fails if it cannot be read). */
static inline llmgov_error last_error(void) {
    llmgov_error e;
    memset(&e, 0, sizeof e);
    CHECK_OK(llmgov_last_error(&e));
    return e;
}

/* Whether two C strings are equal; NULL equals only NULL. */
static inline int same(const char *a, const char *b) {
    return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

#define CHECK_STR(actual, expected)                                                             \
    do {                                                                                        \
        const char *a_ = (actual), *e_ = (expected);                                            \
        if (same(a_, e_)) {                                                                     \
            checks_passed++;                                                                    \
        } else {                                                                                \
            checks_failed++;                                                                    \
            fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #actual, \
                    a_ ? a_ : "(null)", e_ ? e_ : "(null)");                                    \
        }                                                                                       \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                                            \
    do {                                                                                            \
        const char *h_ = (haystack), *n_ = (needle);                                                \
        if (h_ != NULL && strstr(h_, n_) != NULL) {                                                 \
            checks_passed++;                                                                        \
        } else {                                                                                    \
            checks_failed++;                                                                        \
            fprintf(stderr, "%s:%d: %s = \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, #haystack,       \
                    h_ ? h_ : "(null)", n_);                                                        \
        }                                                                                           \
    } while (0)

static inline int finish(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, checks_passed, checks_failed);
    return checks_failed == 0 ? 0 : 1;
}

#endif
