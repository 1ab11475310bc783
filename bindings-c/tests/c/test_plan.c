/* The capacity planner from C: llmgov_plan_capacity gives the same plans as
 * the core, `llmgov plan` and Python's plan_capacity (the values below are
 * bindings-python/tests/test_plan.py's); unset values are has_* flags, so a
 * limit of 0 is an error naming the field, as in every language. */
#include <math.h>
#include <stdbool.h>

#include "check.h"

static bool near(double a, double b) { return fabs(a - b) < 1e-9; }

/* The ceiling on `limit` in `plan`, or NAN if the plan has none. */
static double ceiling(const llmgov_plan *plan, const char *limit) {
    for (size_t i = 0; i < plan->ceilings_len; i++)
        if (same(plan->ceilings[i].limit, limit)) return plan->ceilings[i].rpm;
    return NAN;
}

/* 60 RPM, 100k TPM, 1500 + 500 tokens a request: the seed article's batch. */
static llmgov_plan_input seed_batch(void) {
    return (llmgov_plan_input){.rpm = 60, .has_rpm = true, .tpm = 100000, .has_tpm = true,
                               .avg_input = 1500, .avg_output = 500};
}

static void the_seed_batch_case_is_token_bound(void) {
    llmgov_plan_input input = seed_batch();
    input.utilisation = 1, input.has_utilisation = true;
    llmgov_plan plan;
    CHECK_OK(llmgov_plan_capacity(&input, &plan));
    CHECK_STR(plan.binding, "tpm");
    CHECK(near(plan.sustainable_rpm, 50));
    CHECK(!plan.has_sustainable_rpm_reserving_p95);
    CHECK(plan.ceilings_len == 2);
    CHECK_STR(plan.ceilings[0].limit, "rpm");
    CHECK(near(plan.ceilings[0].rpm, 60));
    CHECK_STR(plan.ceilings[1].limit, "tpm");
    CHECK(near(plan.ceilings[1].rpm, 50));
    CHECK(plan.ceilings[2].limit == NULL);
}

static void concurrency_binds_long_requests(void) {
    /* 10 in flight for 30 s: 20 a minute, at the default 90%. */
    llmgov_plan_input input = seed_batch();
    input.concurrency = 10, input.has_concurrency = true;
    input.latency = 30, input.has_latency = true;
    llmgov_plan plan;
    CHECK_OK(llmgov_plan_capacity(&input, &plan));
    CHECK_STR(plan.binding, "concurrency");
    CHECK(near(plan.sustainable_rpm, 18));
    CHECK(near(ceiling(&plan, "concurrency"), 20));
    CHECK(plan.ceilings_len == 3);
}

static void p95_reservations_lower_the_rate(void) {
    llmgov_plan_input input = seed_batch();
    input.p95_output = 1500, input.has_p95_output = true;
    llmgov_plan plan;
    CHECK_OK(llmgov_plan_capacity(&input, &plan));
    CHECK(near(plan.sustainable_rpm, 45));
    CHECK(plan.has_sustainable_rpm_reserving_p95);
    CHECK(near(plan.sustainable_rpm_reserving_p95, 30));
}

static void a_limit_on_tokens_requests_do_not_use_allows_any_rate(void) {
    llmgov_plan_input input = {.rpm = 60, .has_rpm = true, .output_tpm = 1000, .has_output_tpm = true,
                               .avg_input = 100, .avg_output = 0};
    llmgov_plan plan;
    CHECK_OK(llmgov_plan_capacity(&input, &plan));
    CHECK(isinf(ceiling(&plan, "output_tpm")) && ceiling(&plan, "output_tpm") > 0);
    CHECK_STR(plan.binding, "rpm");
}

/* The same plan as `llmgov plan --rpm 500 --tpm 30000 --avg-input 1200
 * --avg-output 300 --p95-output 900 --json` (Python's test compares with
 * the command): 20 a minute on tpm (18 at 90%); 30000 / 2100 reserving
 * p95s. */
static void it_agrees_with_the_command(void) {
    llmgov_plan_input input = {.rpm = 500, .has_rpm = true, .tpm = 30000, .has_tpm = true,
                               .avg_input = 1200, .avg_output = 300, .p95_output = 900, .has_p95_output = true};
    llmgov_plan plan;
    CHECK_OK(llmgov_plan_capacity(&input, &plan));
    CHECK_STR(plan.binding, "tpm");
    CHECK(near(ceiling(&plan, "rpm"), 500));
    CHECK(near(ceiling(&plan, "tpm"), 20));
    CHECK(near(plan.sustainable_rpm, 18));
    CHECK(near(plan.sustainable_rpm_reserving_p95, 0.9 * 30000 / 2100));
}

/* `input` is refused with `result`, naming `field` = `value`; `*out` is
 * left as it was. */
static void check_refused(const llmgov_plan_input *input, llmgov_result result, const char *field, const char *value) {
    llmgov_plan plan = {.sustainable_rpm = -7};
    CHECK_RESULT(llmgov_plan_capacity(input, &plan), result);
    CHECK(plan.sustainable_rpm == -7);
    llmgov_error e = last_error();
    CHECK(e.result == result);
    CHECK_STR(e.field, field);
    CHECK_STR(e.value, value);
    if (field != NULL) CHECK_CONTAINS(e.message, field);
}

static void bad_input_names_the_field(void) {
    llmgov_plan_input input = seed_batch();
    input.rpm = -1;
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "rpm", "-1");
    input = seed_batch();
    input.tpm = 0; /* set, so not "no limit": zero is refused */
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "tpm", "0");
    input = seed_batch();
    input.utilisation = 1.5, input.has_utilisation = true;
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "utilisation", "1.5");
    input.utilisation = 0;
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "utilisation", "0");
    input = seed_batch();
    input.latency = NAN, input.has_latency = true;
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "latency", "NaN");
    input = seed_batch();
    input.avg_input = -5;
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "avg_input", "-5");
    input = seed_batch();
    input.p95_output = INFINITY, input.has_p95_output = true;
    check_refused(&input, LLMGOV_RESULT_INVALID_REQUEST, "p95_output", "inf");

    /* A zeroed struct sets no limit. */
    llmgov_plan_input none = {.avg_input = 100, .avg_output = 100};
    check_refused(&none, LLMGOV_RESULT_INVALID_REQUEST, "rpm/tpm/input_tpm/output_tpm/concurrency", "none");
    /* A value without its flag is not read. */
    none.rpm = 60;
    check_refused(&none, LLMGOV_RESULT_INVALID_REQUEST, "rpm/tpm/input_tpm/output_tpm/concurrency", "none");
}

static void null_pointers_are_named(void) {
    llmgov_plan_input input = seed_batch();
    llmgov_plan plan;
    CHECK_RESULT(llmgov_plan_capacity(NULL, &plan), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "input");
    CHECK_RESULT(llmgov_plan_capacity(&input, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out");
}

int main(void) {
    the_seed_batch_case_is_token_bound();
    concurrency_binds_long_requests();
    p95_reservations_lower_the_rate();
    a_limit_on_tokens_requests_do_not_use_allows_any_rate();
    it_agrees_with_the_command();
    bad_input_names_the_field();
    null_pointers_are_named();
    return finish("plan");
}
