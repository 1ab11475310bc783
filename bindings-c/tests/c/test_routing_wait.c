/* Waiting for admission by profile from C, on a manual clock advanced by
 * the main thread while other threads wait (as core/tests/routing_wait.rs):
 * the waiter queues on the deployment that passes first among those its
 * class may use; what can never pass is refused at once, and a deadline
 * shorter than the predicted wait too; a cancelled wait leaves the queue
 * holding nothing; a budget threshold crossed while waiting refuses and
 * holds nothing; bad input names the argument. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define SECOND 1000000000ull

#define PACE(secs)                                                                \
    "{\"provider\":true,\"limits\":["                                             \
    "{\"dimension\":\"requests\",\"amount\":1,\"window\":\"" #secs "s\"},"         \
    "{\"dimension\":\"tokens\",\"amount\":10000,\"window\":\"1m\"}]}"

/* Three deployments taking one request per 10 s, 5 s and (the fallback,
 * which the eval class may not use) 2 s. */
static const char *THREE_PACES =
    "{\"scopes\":{\"a/org\":" PACE(10) ",\"b/org\":" PACE(5) ",\"c/org\":" PACE(2) "},"
    "\"profiles\":{"
    "\"main\":{\"deployments\":[\"a/org\",\"b/org\"],\"fallback\":\"spare\","
    "\"fallback_allowed\":{\"eval\":false}},"
    "\"spare\":{\"deployments\":[\"c/org\"]}}}";

/* One deployment, and a tenant's daily budget of 1.0 refused at 30%. */
static const char *BUDGETED =
    "{\"pricing\":{\"gpt-4o\":{\"input\":2.5,\"output\":10.0}},"
    "\"scopes\":{"
    "\"openai/gpt-4o\":{\"provider\":true,\"pricing\":\"gpt-4o\","
    "\"limits\":[{\"dimension\":\"tokens\",\"amount\":150000,\"window\":\"1m\"}]},"
    "\"tenants/*\":{\"limits\":[{\"dimension\":\"cost\",\"budget\":1.0,\"window\":\"1d\"}]}},"
    "\"profiles\":{\"gpt-4o\":{\"deployments\":[\"openai/gpt-4o\"],\"budget\":{\"refuse_at\":0.3}}}}";

/* A thread waiting through llmgov_governor_acquire_profile; the error is
 * copied out on its own thread (the last error is per thread). */
typedef struct {
    const llmgov_governor *gov;
    const llmgov_profile *profile;
    llmgov_request request;
    const llmgov_cancel_token *token;
    pthread_t thread;
    llmgov_result result;
    llmgov_permit *permit;
    llmgov_routed routed;
    char code[32], field[32], scope[32];
    llmgov_dimension dimension;
} waiter;

static void *wait_for_admission(void *arg) {
    waiter *w = arg;
    w->result = llmgov_governor_acquire_profile(w->gov, w->profile, &w->request, LLMGOV_NO_TIMEOUT, w->token,
                                                &w->permit, &w->routed);
    llmgov_error e;
    if (w->result != LLMGOV_RESULT_OK && llmgov_last_error(&e) == LLMGOV_RESULT_OK) {
        snprintf(w->code, sizeof w->code, "%s", e.code);
        snprintf(w->field, sizeof w->field, "%s", e.field ? e.field : "");
        snprintf(w->scope, sizeof w->scope, "%s", e.scope ? e.scope : "");
        w->dimension = e.dimension;
    }
    return NULL;
}

static void start(waiter *w, const llmgov_governor *gov, const llmgov_profile *profile, llmgov_request request,
                  const llmgov_cancel_token *token) {
    memset(w, 0, sizeof *w);
    w->gov = gov;
    w->profile = profile;
    w->request = request;
    w->token = token;
    pthread_create(&w->thread, NULL, wait_for_admission, w);
}

static long json_number(const char *json, const char *after, const char *key) {
    const char *from = after ? strstr(json, after) : json;
    const char *at = from ? strstr(from, key) : NULL;
    return at ? strtol(at + strlen(key), NULL, 10) : -1;
}

static long depth(const llmgov_governor *gov) {
    char *json = NULL;
    if (llmgov_governor_queue_metrics_json(gov, &json) != LLMGOV_RESULT_OK) return -1;
    long n = json_number(json, NULL, "{\"depth\":");
    llmgov_string_free(json);
    return n;
}

/* Yields until `n` requests wait (the threads have queued). */
static void until_depth(const llmgov_governor *gov, long n) {
    while (depth(gov) != n) sched_yield();
}

/* `field` ("in_use", "reserved") of `dimension`'s limit on scope `path`. */
static long amount(const llmgov_governor *gov, const char *path, const char *dimension, const char *field) {
    uint64_t scope = 0;
    char *json = NULL;
    if (llmgov_governor_scope(gov, path, &scope) != LLMGOV_RESULT_OK) return -1;
    if (llmgov_governor_scope_snapshot_json(gov, scope, &json) != LLMGOV_RESULT_OK) return -1;
    char key[64];
    snprintf(key, sizeof key, "\"dimension\":\"%s\"", dimension);
    char name[32];
    snprintf(name, sizeof name, "\"%s\":", field);
    long n = json_number(json, key, name);
    llmgov_string_free(json);
    return n;
}

static void advance(llmgov_manual_clock *clock, const llmgov_governor *gov, uint64_t ns) {
    uint64_t next = 0;
    CHECK_OK(llmgov_manual_clock_advance(clock, ns));
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
}

typedef struct {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov;
    llmgov_profile *profile;
    llmgov_permit *busy[3]; /* one permit on each deployment */
} paces;

/* THREE_PACES with every deployment's one request taken. */
static paces all_busy(void) {
    paces p = {llmgov_manual_clock_new(0), NULL, NULL, {NULL}};
    CHECK_OK(llmgov_governor_from_json(THREE_PACES, p.clock, &p.gov));
    CHECK_OK(llmgov_profile_new(p.gov, "main", NULL, 0, &p.profile));
    const char *expected[] = {"a/org", "b/org", "c/org"};
    llmgov_request request = {0};
    request.input_tokens = 10;
    for (int i = 0; i < 3; i++) {
        llmgov_routed routed;
        CHECK_OK(llmgov_governor_acquire_profile(p.gov, p.profile, &request, LLMGOV_NO_TIMEOUT, NULL, &p.busy[i],
                                                 &routed));
        CHECK_STR(routed.deployment, expected[i]); /* admitted at once, without waiting */
    }
    CHECK(depth(p.gov) == 0);
    return p;
}

static void release(paces *p) {
    for (int i = 0; i < 3; i++) llmgov_permit_free(p->busy[i]);
    llmgov_profile_free(p->profile);
    llmgov_governor_free(p->gov);
    llmgov_manual_clock_free(p->clock);
}

static void a_waiter_queues_on_the_deployment_that_passes_first_its_class_may_use(void) {
    paces p = all_busy();
    uint64_t eval = 0;
    CHECK_OK(llmgov_governor_class(p.gov, "eval", &eval));
    llmgov_request request = {0};
    request.input_tokens = 10;
    request.route = 12345; /* not read: the deployment's route is used */
    waiter any, own;
    start(&any, p.gov, p.profile, request, NULL);
    request.class_id = eval;
    start(&own, p.gov, p.profile, request, NULL);
    until_depth(p.gov, 2);

    /* The fallback frees first (2 s): the default class takes it. */
    advance(p.clock, p.gov, 2 * SECOND);
    pthread_join(any.thread, NULL);
    CHECK_RESULT(any.result, LLMGOV_RESULT_OK);
    CHECK_STR(any.routed.deployment, "c/org");
    CHECK_STR(any.routed.profile, "spare");
    CHECK(any.routed.fell_back && !any.routed.degraded);
    /* eval never leaves its profile: it waits on b, its soonest (5 s). */
    CHECK(depth(p.gov) == 1);
    advance(p.clock, p.gov, 3 * SECOND);
    pthread_join(own.thread, NULL);
    CHECK_RESULT(own.result, LLMGOV_RESULT_OK);
    CHECK_STR(own.routed.deployment, "b/org");
    CHECK_STR(own.routed.profile, "main");
    CHECK(!own.routed.fell_back);
    /* The permits are ordinary ones, held on the chosen routes. */
    CHECK(amount(p.gov, "c/org", "requests", "reserved") == 2);
    CHECK(amount(p.gov, "b/org", "requests", "reserved") == 2);
    CHECK(amount(p.gov, "a/org", "requests", "reserved") == 1);
    CHECK_OK(llmgov_permit_settle(own.permit, (llmgov_usage){10, 0, 5}));
    llmgov_permit_free(any.permit);
    llmgov_permit_free(own.permit);
    release(&p);
}

static void what_can_never_pass_is_refused_at_once_and_a_short_timeout_too(void) {
    paces p = all_busy();
    llmgov_request request = {0};
    llmgov_permit *permit = (llmgov_permit *)0x1;
    llmgov_routed routed = {NULL, NULL, false, false};
    /* 20k tokens against 10k a minute: on this thread, with nobody to
     * advance the clock, so it can only return at once. */
    request.input_tokens = 20000;
    CHECK_RESULT(llmgov_governor_acquire_profile(p.gov, p.profile, &request, LLMGOV_NO_TIMEOUT, NULL, &permit,
                                                 &routed),
                 LLMGOV_RESULT_NEVER_FITS);
    CHECK(last_error().dimension == LLMGOV_DIMENSION_TOKENS);
    /* The soonest deployment passes in 2 s: a 1 s timeout cannot be met,
     * nor a 1 s deadline of the request's own. */
    request.input_tokens = 10;
    CHECK_RESULT(llmgov_governor_acquire_profile(p.gov, p.profile, &request, 1 * SECOND, NULL, &permit, &routed),
                 LLMGOV_RESULT_DEADLINE_EXCEEDED);
    llmgov_error e = last_error();
    CHECK(e.has_retry_after && e.retry_after_ms == 2000 && e.waited_ns == 0);
    request.has_deadline = true;
    request.deadline_ns = 1 * SECOND;
    CHECK_RESULT(llmgov_governor_acquire_profile(p.gov, p.profile, &request, LLMGOV_NO_TIMEOUT, NULL, &permit,
                                                 &routed),
                 LLMGOV_RESULT_DEADLINE_EXCEEDED);
    CHECK(last_error().retry_after_ms == 2000);
    CHECK(permit == (llmgov_permit *)0x1 && routed.deployment == NULL); /* nothing written */
    CHECK(depth(p.gov) == 0);
    CHECK(amount(p.gov, "c/org", "requests", "reserved") == 1);
    release(&p);
}

static void a_cancelled_wait_leaves_the_queue_holding_nothing(void) {
    paces p = all_busy();
    llmgov_cancel_token *token = llmgov_cancel_token_new();
    llmgov_request request = {0};
    request.input_tokens = 10;
    waiter w;
    start(&w, p.gov, p.profile, request, token);
    until_depth(p.gov, 1);
    CHECK_OK(llmgov_cancel_token_cancel(token));
    pthread_join(w.thread, NULL);
    CHECK_RESULT(w.result, LLMGOV_RESULT_CANCELLED);
    CHECK_STR(w.code, "cancelled");
    CHECK_STR(w.field, "cancel");
    CHECK(w.permit == NULL && w.routed.deployment == NULL);
    CHECK(depth(p.gov) == 0); /* left the queue at once */
    /* At the refill nobody left behind takes c's request. */
    advance(p.clock, p.gov, 2 * SECOND);
    CHECK(amount(p.gov, "c/org", "requests", "in_use") == 0);
    CHECK(amount(p.gov, "c/org", "requests", "reserved") == 1);

    /* A token cancelled already refuses at once, even where a deployment
     * would admit it now. */
    llmgov_permit *permit = (llmgov_permit *)0x1;
    llmgov_routed routed;
    CHECK_RESULT(llmgov_governor_acquire_profile(p.gov, p.profile, &request, LLMGOV_NO_TIMEOUT, token, &permit,
                                                 &routed),
                 LLMGOV_RESULT_CANCELLED);
    CHECK(permit == (llmgov_permit *)0x1);
    CHECK(amount(p.gov, "c/org", "requests", "reserved") == 1);
    llmgov_cancel_token_free(token);

    /* An uncancelled token: admitted as without one. */
    token = llmgov_cancel_token_new();
    CHECK_OK(llmgov_governor_acquire_profile(p.gov, p.profile, &request, LLMGOV_NO_TIMEOUT, token, &permit,
                                             &routed));
    CHECK_STR(routed.deployment, "c/org");
    llmgov_permit_free(permit);
    llmgov_cancel_token_free(token);
    release(&p);
}

static void a_budget_threshold_crossed_while_waiting_refuses_and_holds_nothing(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_json(BUDGETED, clock, &gov));
    const char *tenant = "tenants/acme";
    llmgov_profile *profile = NULL;
    CHECK_OK(llmgov_profile_new(gov, "gpt-4o", &tenant, 1, &profile));
    /* 100k input: 0.25 each. */
    llmgov_request request = {0};
    request.input_tokens = 100000;
    llmgov_permit *first = NULL;
    llmgov_routed routed;
    CHECK_OK(llmgov_governor_try_acquire_profile(gov, profile, &request, &first, &routed));
    waiter w;
    start(&w, gov, profile, request, NULL);
    until_depth(gov, 1); /* 50k tokens left of 150k a minute */

    /* Meanwhile a request straight on the route takes the spend to 0.35,
     * and 40k more tokens: 10k left, so the waiter needs 36 s of refill. */
    const char *paths[] = {"tenants/acme", "openai/gpt-4o"};
    llmgov_request direct = {0};
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &direct.route));
    direct.input_tokens = 40000;
    llmgov_permit *straight = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &direct, &straight));
    advance(clock, gov, 35 * SECOND);
    CHECK(depth(gov) == 1);
    advance(clock, gov, 1 * SECOND);
    pthread_join(w.thread, NULL);
    CHECK_RESULT(w.result, LLMGOV_RESULT_RATE_LIMITED);
    CHECK_STR(w.code, "rate_limited");
    CHECK_STR(w.scope, "tenants/acme");
    CHECK(w.dimension == LLMGOV_DIMENSION_COST);
    CHECK(w.permit == NULL);
    /* The waiter's permit was cancelled: 0.25 + 0.10 stay, in millionths,
     * and the two others' 140k tokens. */
    CHECK(amount(gov, "tenants/acme", "cost", "in_use") == 350000);
    CHECK(amount(gov, "openai/gpt-4o", "tokens", "reserved") == 140000);
    CHECK(depth(gov) == 0);

    llmgov_permit_free(straight);
    llmgov_permit_free(first);
    llmgov_profile_free(profile);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

static void bad_input_names_the_argument(void) {
    paces p = all_busy();
    llmgov_cancel_token *token = llmgov_cancel_token_new();
    llmgov_request request = {0};
    llmgov_permit *permit = (llmgov_permit *)0x1;
    llmgov_routed routed;
    const llmgov_governor *gov = p.gov;
    const llmgov_profile *profile = p.profile;
    uint64_t none = LLMGOV_NO_TIMEOUT;
    CHECK_RESULT(llmgov_governor_acquire_profile(NULL, profile, &request, none, token, &permit, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK_RESULT(llmgov_governor_acquire_profile(gov, NULL, &request, none, token, &permit, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "profile");
    CHECK_RESULT(llmgov_governor_acquire_profile(gov, profile, NULL, none, token, &permit, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "request");
    CHECK_RESULT(llmgov_governor_acquire_profile(gov, profile, &request, none, token, NULL, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_permit");
    CHECK_RESULT(llmgov_governor_acquire_profile(gov, profile, &request, none, token, &permit, NULL),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_routed");
    request.class_id = 99;
    CHECK_RESULT(llmgov_governor_acquire_profile(gov, profile, &request, none, token, &permit, &routed),
                 LLMGOV_RESULT_INVALID_REQUEST);
    llmgov_error e = last_error();
    CHECK_STR(e.field, "class_id");
    CHECK_STR(e.value, "99");
    request.class_id = 0;

    /* A profile of another governor. */
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *other = NULL;
    CHECK_OK(llmgov_governor_from_json(THREE_PACES, clock, &other));
    CHECK_RESULT(llmgov_governor_acquire_profile(other, profile, &request, none, token, &permit, &routed),
                 LLMGOV_RESULT_INVALID_REQUEST);
    CHECK_STR(last_error().field, "profile");
    CHECK(permit == (llmgov_permit *)0x1);
    CHECK(depth(gov) == 0 && depth(other) == 0);
    llmgov_governor_free(other);
    llmgov_manual_clock_free(clock);
    llmgov_cancel_token_free(token);
    release(&p);
}

int main(void) {
    a_waiter_queues_on_the_deployment_that_passes_first_its_class_may_use();
    what_can_never_pass_is_refused_at_once_and_a_short_timeout_too();
    a_cancelled_wait_leaves_the_queue_holding_nothing();
    a_budget_threshold_crossed_while_waiting_refuses_and_holds_nothing();
    bad_input_names_the_argument();
    return finish("routing_wait");
}
