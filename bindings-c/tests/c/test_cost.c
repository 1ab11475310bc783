/* Cost budgets from C: a request is priced from the route's pricing table,
 * reserved on the budget and settled with usage; an exhausted budget
 * refuses on LLMGOV_DIMENSION_COST; a profile's thresholds degrade to a
 * cheaper profile (llmgov_routed.degraded), then refuse; threads spending
 * one budget together never overspend it beyond what the requests in
 * flight used past their estimates, and admissions stop once it is spent;
 * a bad budget is a config error naming the field. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

/* Prices per 1M tokens: gpt-4o 2.5 in, 10 out; mini 0.15 in, 0.6 out. A
 * tenant has `budget` a day. */
static const char *CONFIG_FORMAT =
    "{\"pricing\":{\"gpt-4o\":{\"input\":2.5,\"cached_input\":1.25,\"output\":10.0},"
    "\"mini\":{\"input\":0.15,\"output\":0.6}},"
    "\"scopes\":{"
    "\"openai/gpt-4o\":{\"provider\":true,\"pricing\":\"gpt-4o\","
    "\"limits\":[{\"dimension\":\"requests\",\"amount\":10000,\"window\":\"1m\"}]},"
    "\"openai/mini\":{\"provider\":true,\"pricing\":\"mini\","
    "\"limits\":[{\"dimension\":\"requests\",\"amount\":10000,\"window\":\"1m\"}]},"
    "\"tenants/*\":{\"limits\":[{\"dimension\":\"cost\",\"budget\":%s,\"window\":\"1d\",\"slots\":24}]}},"
    "\"profiles\":{\"gpt-4o\":{\"deployments\":[\"openai/gpt-4o\"],\"budget\":%s,"
    "\"fallback_allowed\":{\"eval\":false}},"
    "\"mini\":{\"deployments\":[\"openai/mini\"]}}}";

static const llmgov_governor *build(const char *budget, const char *thresholds, llmgov_manual_clock *clock) {
    char config[2048];
    snprintf(config, sizeof config, CONFIG_FORMAT, budget, thresholds);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_json(config, clock, &gov));
    return gov;
}

/* The tenant's cost limit's in_use, in millionths. */
static long cost_in_use(const llmgov_governor *gov) {
    uint64_t scope = 0;
    char *json = NULL;
    if (llmgov_governor_scope(gov, "tenants/acme", &scope) != LLMGOV_RESULT_OK) return -1;
    if (llmgov_governor_scope_snapshot_json(gov, scope, &json) != LLMGOV_RESULT_OK) return -1;
    const char *cost = strstr(json, "\"dimension\":\"cost\"");
    const char *at = cost ? strstr(cost, "\"in_use\":") : NULL;
    long n = at ? strtol(at + 9, NULL, 10) : -1;
    llmgov_string_free(json);
    return n;
}

static void reserved_from_the_estimate_and_settled_with_usage(llmgov_manual_clock *clock) {
    const llmgov_governor *gov = build("1.0", "{}", clock);
    const char *paths[] = {"tenants/acme", "openai/gpt-4o"};
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &request.route));
    /* 100k input + 10k max output: 0.25 + 0.10. */
    request.input_tokens = 100000;
    request.max_output_tokens = 10000;
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit));
    CHECK(cost_in_use(gov) == 350000);
    /* 2k output, half the prompt from cache: 0.125 + 0.0625 + 0.02. */
    CHECK_OK(llmgov_permit_settle(permit, (llmgov_usage){100000, 50000, 2000}));
    CHECK(cost_in_use(gov) == 207500);
    llmgov_permit_free(permit);

    /* Spend the rest: refused on the cost dimension, with the scope. */
    request.max_output_tokens = 0;
    request.input_tokens = 316000; /* 0.79 */
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit));
    llmgov_permit_free(permit);
    request.input_tokens = 2000;
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK(e.dimension == LLMGOV_DIMENSION_COST);
    CHECK_STR(e.scope, "tenants/acme");
    CHECK(e.has_retry_after);
    llmgov_governor_free(gov);
}

static void thresholds_degrade_to_the_cheaper_profile_then_refuse(llmgov_manual_clock *clock) {
    const llmgov_governor *gov =
        build("1.0", "{\"degrade_at\":0.6,\"degrade_to\":\"mini\",\"refuse_at\":0.85}", clock);
    const char *tenant = "tenants/acme";
    llmgov_profile *profile = NULL;
    CHECK_OK(llmgov_profile_new(gov, "gpt-4o", &tenant, 1, &profile));
    llmgov_request big = {0};
    big.input_tokens = 100000; /* 0.25 on gpt-4o, 0.015 on mini */
    llmgov_routed routed;
    llmgov_permit *permit = NULL;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(llmgov_governor_try_acquire_profile(gov, profile, &big, &permit, &routed));
        CHECK_STR(routed.profile, "gpt-4o");
        CHECK(!routed.degraded);
        llmgov_permit_free(permit);
    }
    /* 75% spent: past 0.6, the cheaper profile serves. */
    CHECK_OK(llmgov_governor_try_acquire_profile(gov, profile, &big, &permit, &routed));
    CHECK(routed.degraded && !routed.fell_back);
    CHECK_STR(routed.profile, "mini");
    CHECK_STR(routed.deployment, "openai/mini");
    llmgov_permit_free(permit);
    CHECK(cost_in_use(gov) == 765000);

    /* A class that may not leave is refused at the degrade threshold. */
    llmgov_request eval = big;
    CHECK_OK(llmgov_governor_class(gov, "eval", &eval.class_id));
    CHECK_RESULT(llmgov_governor_try_acquire_profile(gov, profile, &eval, &permit, &routed),
                 LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK(e.dimension == LLMGOV_DIMENSION_COST);
    CHECK_STR(e.scope, "tenants/acme");

    /* Past 0.85 everything is refused. */
    for (int i = 0; i < 6; i++) {
        CHECK_OK(llmgov_governor_try_acquire_profile(gov, profile, &big, &permit, &routed));
        llmgov_permit_free(permit);
    }
    CHECK_RESULT(llmgov_governor_try_acquire_profile(gov, profile, &big, &permit, &routed),
                 LLMGOV_RESULT_RATE_LIMITED);
    CHECK(last_error().dimension == LLMGOV_DIMENSION_COST);
    llmgov_profile_free(profile);
    llmgov_governor_free(gov);
}

/* Spending one budget from many threads (as core/tests/cost.rs): each
 * request estimates 1000 input + 500 max output on gpt-4o, 2500 + 5000 =
 * 7500 millionths, and settles with `output_from` to `output_from +
 * output_spread - 1` output tokens, 10 millionths each. */
#define SPENDERS 4
#define SPEND_ATTEMPTS 2000
#define BUDGET 500000
#define ESTIMATE 7500
#define MAX_OVERAGE 2000 /* 700 output against 500 reserved */
#define MAX_REFUND 4000  /* 100 output against 500 reserved */

typedef struct {
    const llmgov_governor *gov;
    uint64_t route;
    int index;
    unsigned output_from, output_spread;
    long spent;
    int admitted, refused, admitted_after_refusal, wrong_detail;
} spender;

static void *spend(void *arg) {
    spender *s = arg;
    llmgov_request request = {0};
    request.route = s->route;
    request.input_tokens = 1000;
    request.max_output_tokens = 500;
    for (unsigned i = 0; i < SPEND_ATTEMPTS; i++) {
        llmgov_permit *permit = NULL;
        if (llmgov_governor_try_acquire(s->gov, &request, &permit) != LLMGOV_RESULT_OK) {
            llmgov_error e;
            if (llmgov_last_error(&e) != LLMGOV_RESULT_OK || e.result != LLMGOV_RESULT_RATE_LIMITED ||
                e.dimension != LLMGOV_DIMENSION_COST || !same(e.scope, "tenants/acme")) {
                s->wrong_detail++;
            }
            s->refused++;
            continue;
        }
        if (s->refused > 0) s->admitted_after_refusal++;
        uint64_t output = s->output_from + ((unsigned)s->index * 31 + i * 17) % s->output_spread;
        if (llmgov_permit_settle(permit, (llmgov_usage){1000, 0, output}) != LLMGOV_RESULT_OK) s->wrong_detail++;
        llmgov_permit_free(permit);
        s->spent += 2500 + (long)output * 10;
        s->admitted++;
    }
    return NULL;
}

/* Runs SPENDERS threads on a fresh 0.5 budget; the sum of their tallies. */
static spender spend_together(llmgov_manual_clock *clock, unsigned output_from, unsigned output_spread,
                              const llmgov_governor **out_gov) {
    const llmgov_governor *gov = build("0.5", "{}", clock);
    const char *paths[] = {"tenants/acme", "openai/gpt-4o"};
    uint64_t route = 0;
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &route));
    spender spenders[SPENDERS];
    pthread_t threads[SPENDERS];
    for (int t = 0; t < SPENDERS; t++) {
        spenders[t] = (spender){gov, route, t, output_from, output_spread, 0, 0, 0, 0, 0};
        CHECK(pthread_create(&threads[t], NULL, spend, &spenders[t]) == 0);
    }
    spender total = {0};
    for (int t = 0; t < SPENDERS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0);
        total.spent += spenders[t].spent;
        total.admitted += spenders[t].admitted;
        total.refused += spenders[t].refused;
        total.admitted_after_refusal += spenders[t].admitted_after_refusal;
        total.wrong_detail += spenders[t].wrong_detail;
    }
    CHECK(total.wrong_detail == 0);
    CHECK(total.admitted + total.refused == SPENDERS * SPEND_ATTEMPTS);
    /* The budget holds exactly the settled costs. */
    CHECK(cost_in_use(gov) == total.spent);
    /* Each request in flight may use at most one overage past its estimate. */
    CHECK(total.spent <= BUDGET + SPENDERS * MAX_OVERAGE);
    *out_gov = gov;
    return total;
}

/* Settles under and over their estimates: the budget is all but spent. */
static void concurrent_requests_never_overspend_a_budget(llmgov_manual_clock *clock) {
    const llmgov_governor *gov = NULL;
    spender total = spend_together(clock, 100, 601, &gov);
    /* A refusal leaves less than one estimate free, plus what the other
     * threads' permits then in flight gave back. */
    CHECK(total.spent > BUDGET - ESTIMATE - (SPENDERS - 1) * MAX_REFUND);
    CHECK(total.admitted > BUDGET / (2500 + 700 * 10));
    llmgov_governor_free(gov);
}

/* Every settle over its estimate, so nothing ever comes back: once a
 * request is refused no other is admitted, on any thread. */
static void admissions_stop_once_a_budget_is_spent(llmgov_manual_clock *clock) {
    const llmgov_governor *gov = NULL;
    spender total = spend_together(clock, 501, 200, &gov);
    CHECK(total.admitted_after_refusal == 0);
    CHECK(total.spent > BUDGET - ESTIMATE);
    const char *paths[] = {"tenants/acme", "openai/gpt-4o"};
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &request.route));
    request.input_tokens = 1000;
    request.max_output_tokens = 500;
    llmgov_permit *permit = NULL;
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(last_error().dimension == LLMGOV_DIMENSION_COST);
    llmgov_governor_free(gov);
}

static void a_bad_budget_names_the_field(llmgov_manual_clock *clock) {
    char config[2048];
    snprintf(config, sizeof config, CONFIG_FORMAT, "1.0", "{\"degrade_at\":0.6}");
    const llmgov_governor *gov = (const llmgov_governor *)0x1;
    CHECK_RESULT(llmgov_governor_from_json(config, clock, &gov), LLMGOV_RESULT_INVALID_CONFIG);
    llmgov_error e = last_error();
    CHECK_CONTAINS(e.field, "budget.degrade_to");
    CHECK(gov == (const llmgov_governor *)0x1);
}

int main(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    reserved_from_the_estimate_and_settled_with_usage(clock);
    thresholds_degrade_to_the_cheaper_profile_then_refuse(clock);
    concurrent_requests_never_overspend_a_budget(clock);
    admissions_stop_once_a_budget_is_spent(clock);
    a_bad_budget_names_the_field(clock);
    llmgov_manual_clock_free(clock);
    return finish("cost");
}
