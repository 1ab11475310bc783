/* The Redis governor through the C ABI, against the redis-server named by
 * LLMGOV_REDIS_URL (`make test-c` starts one; skipped without it): two
 * governors on one prefix share a limit exactly, settle refunds, cancel
 * frees a slot, a permit reconciles once, a blocking acquire waits for a
 * drained bucket and is admitted, a predicted wait past the timeout is
 * refused at once, a cancel token stops a wait on a held slot, local scopes
 * follow a manual clock, leased mode (from JSON) stays within the limit,
 * a report holds the route's local provider scope (and only classifies on a
 * route of shared scopes alone), frees inside an event callback are safe,
 * and bad input names the field.
 * Under valgrind, freeing everything leaks nothing. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MS 1000000ull

static const char *SCOPE = "openai/org/gpt-4o";

/* A governor on a fresh prefix (or `prefix` to share one) with `limits` on
 * the shared scope. The url is LLMGOV_REDIS_URL's; a slow call is no outage
 * (under valgrind), hence the 2 s timeout. */
static llmgov_result redis_governor(const char *prefix, const char *limits, const llmgov_redis_governor **out) {
    char config[1024];
    snprintf(config, sizeof config,
             "[scopes.\"%s\"]\n"
             "limits = [%s]\n"
             "[redis]\n"
             "prefix = \"%s\"\n"
             "expected_processes = 2\n"
             "timeout = \"2s\"\n"
             "[redis.scopes.\"%s\"]\n"
             "mode = \"exact\"\n",
             SCOPE, limits, prefix, SCOPE);
    return llmgov_redis_governor_from_toml(config, NULL, out);
}

static void fresh_prefix(char *out, size_t size, const char *test) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(out, size, "c-%s-%d-%lld%09ld", test, (int)getpid(), (long long)now.tv_sec, now.tv_nsec);
}

static const llmgov_redis_governor *governor(const char *test, const char *limits, uint64_t *route) {
    char prefix[128];
    fresh_prefix(prefix, sizeof prefix, test);
    const llmgov_redis_governor *gov = NULL;
    CHECK_OK(redis_governor(prefix, limits, &gov));
    CHECK_OK(llmgov_redis_governor_route(gov, &SCOPE, 1, route));
    return gov;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static long redis_calls(const llmgov_redis_governor *gov) {
    char *json = NULL;
    if (llmgov_redis_governor_health_json(gov, &json) != LLMGOV_RESULT_OK) return -1;
    const char *at = strstr(json, "\"redis_calls\":");
    long n = at ? strtol(at + strlen("\"redis_calls\":"), NULL, 10) : -1;
    llmgov_string_free(json);
    return n;
}

static const char *TEN_A_MINUTE = "{ dimension = \"requests\", amount = 10, window = \"1m\" }";
static const char *ONE_SLOT = "{ dimension = \"concurrency\", amount = 1 }";

static void two_governors_share_one_limit_exactly(void) {
    char prefix[128];
    fresh_prefix(prefix, sizeof prefix, "shared");
    const llmgov_redis_governor *a = NULL, *b = NULL;
    CHECK_OK(redis_governor(prefix, TEN_A_MINUTE, &a));
    CHECK_OK(redis_governor(prefix, TEN_A_MINUTE, &b));
    uint64_t route_a = 0, route_b = 0;
    CHECK_OK(llmgov_redis_governor_route(a, &SCOPE, 1, &route_a));
    CHECK_OK(llmgov_redis_governor_route(b, &SCOPE, 1, &route_b));
    CHECK(route_a != 0 && route_a != route_b);
    int admitted = 0;
    for (int i = 0; i < 30; i++) {
        const llmgov_redis_governor *gov = i % 2 ? b : a;
        llmgov_redis_permit *permit = NULL;
        llmgov_result r = llmgov_redis_governor_try_acquire(gov, i % 2 ? route_b : route_a, 10, 0, 10, &permit);
        if (r == LLMGOV_RESULT_OK) {
            admitted++;
            CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){10, 0, 10}));
            llmgov_redis_permit_free(permit);
        } else {
            CHECK(r == LLMGOV_RESULT_RATE_LIMITED);
        }
    }
    CHECK(admitted == 10);
    llmgov_redis_permit *permit = (llmgov_redis_permit *)0x1;
    CHECK_RESULT(llmgov_redis_governor_try_acquire(a, route_a, 10, 0, 10, &permit), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "rate_limited");
    CHECK_STR(e.scope, SCOPE);
    CHECK(e.dimension == LLMGOV_DIMENSION_REQUESTS);
    CHECK(e.has_retry_after && e.retry_after_ms > 1000 && e.retry_after_ms <= 6000);
    CHECK(permit == (llmgov_redis_permit *)0x1);
    /* The route of one is not the other's. */
    CHECK_RESULT(llmgov_redis_governor_try_acquire(b, route_a, 10, 0, 10, &permit), LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "route");
    CHECK_CONTAINS(e.message, "belongs to another governor");
    char *health = NULL;
    CHECK_OK(llmgov_redis_governor_health_json(a, &health));
    CHECK_CONTAINS(health, "\"degraded\":false");
    CHECK_CONTAINS(health, "\"last_error\":null");
    llmgov_string_free(health);
    llmgov_redis_governor_free(a);
    llmgov_redis_governor_free(b);
}

static void settle_refunds_and_a_permit_reconciles_once(void) {
    uint64_t route = 0;
    const llmgov_redis_governor *gov =
        governor("settle", "{ dimension = \"tokens\", amount = 1000, window = \"1m\" }", &route);
    llmgov_redis_permit *first = NULL, *second = NULL, *third = NULL;
    /* Above the limit's burst: never, and waiting cannot help. */
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 100, 0, 901, &first), LLMGOV_RESULT_NEVER_FITS);
    llmgov_error e = last_error();
    CHECK(e.cost == 1001 && e.burst == 1000);
    CHECK_STR(e.scope, SCOPE);
    CHECK_RESULT(llmgov_redis_governor_acquire(gov, route, 100, 0, 901, LLMGOV_NO_TIMEOUT, NULL, &first),
                 LLMGOV_RESULT_NEVER_FITS);
    CHECK(first == NULL);
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 100, 0, 500, &first));
    /* 600 reserved: 900 more do not fit until the unused output comes back. */
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 100, 0, 800, &second), LLMGOV_RESULT_RATE_LIMITED);
    CHECK_OK(llmgov_redis_permit_settle(first, (llmgov_usage){100, 0, 0}));
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 100, 0, 800, &second));
    CHECK_RESULT(llmgov_redis_permit_settle(first, (llmgov_usage){100, 0, 0}), LLMGOV_RESULT_PERMIT_FINISHED);
    e = last_error();
    CHECK_STR(e.code, "permit_finished");
    CHECK_CONTAINS(e.message, "already reconciled");
    CHECK_RESULT(llmgov_redis_permit_cancel(first), LLMGOV_RESULT_PERMIT_FINISHED);
    /* A usage out of range changes nothing: the permit can still be cancelled. */
    CHECK_RESULT(llmgov_redis_permit_settle(second, (llmgov_usage){10, 20, 0}), LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "cached_input_tokens");
    CHECK_STR(e.value, "20");
    CHECK_OK(llmgov_redis_permit_cancel(second));
    bool fallback = true;
    CHECK_OK(llmgov_redis_permit_from_fallback(second, &fallback));
    CHECK(!fallback);
    /* Cancelled: its 900 came back. */
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 100, 0, 800, &third));
    /* A permit outlives its governor's handle, and still settles. */
    llmgov_redis_governor_free(gov);
    CHECK_OK(llmgov_redis_permit_settle(third, (llmgov_usage){100, 0, 800}));
    llmgov_redis_permit_free(first);
    llmgov_redis_permit_free(second);
    llmgov_redis_permit_free(third);
}

static void cancel_frees_a_slot(void) {
    uint64_t route = 0;
    const llmgov_redis_governor *gov = governor("cancel", ONE_SLOT, &route);
    llmgov_redis_permit *held = NULL, *next = NULL;
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &held));
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &next), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK(e.dimension == LLMGOV_DIMENSION_CONCURRENCY && !e.has_retry_after);
    CHECK_OK(llmgov_redis_permit_cancel(held));
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &next));
    CHECK_OK(llmgov_redis_permit_settle(next, (llmgov_usage){10, 0, 3}));
    CHECK_OK(llmgov_redis_governor_heartbeat(gov));
    CHECK_OK(llmgov_redis_governor_return_leases(gov));
    llmgov_redis_permit_free(held);
    llmgov_redis_permit_free(next);
    llmgov_redis_governor_free(gov);
}

static void a_blocking_acquire_waits_for_a_drained_bucket(void) {
    uint64_t route = 0;
    const llmgov_redis_governor *gov =
        governor("wait", "{ dimension = \"requests\", amount = 5, window = \"1s\" }", &route);
    for (int i = 0; i < 5; i++) {
        llmgov_redis_permit *permit = NULL;
        CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit));
        CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){10, 0, 10}));
        llmgov_redis_permit_free(permit);
    }
    llmgov_redis_permit *permit = NULL;
    uint64_t started = now_ns();
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK(e.has_retry_after && e.retry_after_ns <= 200 * MS);
    /* One request refills every 200 ms: admitted once the refusal's
     * retry_after has passed, not before. */
    CHECK_OK(llmgov_redis_governor_acquire(gov, route, 10, 0, 10, 5000 * MS, NULL, &permit));
    CHECK(now_ns() - started >= e.retry_after_ns);
    CHECK(permit != NULL);
    CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){10, 0, 10}));
    llmgov_redis_permit_free(permit);
    llmgov_redis_governor_free(gov);
}

static void a_predicted_wait_past_the_timeout_is_refused_at_once(void) {
    uint64_t route = 0;
    const llmgov_redis_governor *gov =
        governor("deadline", "{ dimension = \"requests\", amount = 1, window = \"1m\" }", &route);
    llmgov_redis_permit *first = NULL;
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &first));
    llmgov_redis_permit *permit = (llmgov_redis_permit *)0x1;
    long calls = redis_calls(gov);
    CHECK_RESULT(llmgov_redis_governor_acquire(gov, route, 10, 0, 10, 2000 * MS, NULL, &permit),
                 LLMGOV_RESULT_DEADLINE_EXCEEDED);
    /* Refused after one try, not at the timeout. */
    CHECK(redis_calls(gov) - calls == 1);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "deadline_exceeded");
    CHECK(e.has_retry_after && e.retry_after_ms > 50000 && e.retry_after_ms <= 60000);
    CHECK(permit == (llmgov_redis_permit *)0x1);
    llmgov_redis_permit_free(first);
    llmgov_redis_governor_free(gov);
}

typedef struct {
    const llmgov_redis_governor *gov;
    uint64_t route;
    const llmgov_cancel_token *token;
    llmgov_result result;
    llmgov_redis_permit *permit;
    char code[32], field[32];
} waiter;

static void *wait_for_a_slot(void *arg) {
    waiter *w = arg;
    w->result = llmgov_redis_governor_acquire(w->gov, w->route, 10, 0, 10, LLMGOV_NO_TIMEOUT, w->token, &w->permit);
    llmgov_error e;
    if (w->result != LLMGOV_RESULT_OK && llmgov_last_error(&e) == LLMGOV_RESULT_OK) {
        snprintf(w->code, sizeof w->code, "%s", e.code);
        snprintf(w->field, sizeof w->field, "%s", e.field ? e.field : "");
    }
    return NULL;
}

static void a_cancel_token_stops_a_wait_on_a_held_slot(void) {
    uint64_t route = 0;
    const llmgov_redis_governor *gov = governor("token", ONE_SLOT, &route);
    llmgov_redis_permit *held = NULL;
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &held));
    llmgov_cancel_token *token = llmgov_cancel_token_new();
    waiter w = {gov, route, token, LLMGOV_RESULT_OK, NULL, "", ""};
    long calls = redis_calls(gov);
    pthread_t thread;
    pthread_create(&thread, NULL, wait_for_a_slot, &w);
    /* Polling: refused at least twice. */
    while (redis_calls(gov) < calls + 2) sched_yield();
    uint64_t cancelled_at = now_ns();
    CHECK_OK(llmgov_cancel_token_cancel(token));
    pthread_join(thread, NULL);
    CHECK(now_ns() - cancelled_at < 1000 * MS); /* not a full poll, let alone forever */
    CHECK(w.result == LLMGOV_RESULT_CANCELLED && w.permit == NULL);
    CHECK_STR(w.code, "cancelled");
    CHECK_STR(w.field, "cancel");
    /* The waiter holds nothing: once the slot is given back, it is free. */
    CHECK_OK(llmgov_redis_permit_cancel(held));
    llmgov_redis_permit *next = NULL;
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &next));
    /* A token already cancelled refuses at once. */
    llmgov_redis_permit *permit = (llmgov_redis_permit *)0x1;
    CHECK_RESULT(llmgov_redis_governor_acquire(gov, route, 10, 0, 10, LLMGOV_NO_TIMEOUT, token, &permit),
                 LLMGOV_RESULT_CANCELLED);
    CHECK(permit == (llmgov_redis_permit *)0x1);
    CHECK_OK(llmgov_redis_permit_cancel(next));
    llmgov_cancel_token_free(token);
    llmgov_redis_permit_free(held);
    llmgov_redis_permit_free(next);
    llmgov_redis_governor_free(gov);
}

/* Local scopes (here the tenants template) follow the manual clock the governor was
 * built with; the shared one runs on Redis's time. */
static void local_scopes_follow_a_manual_clock(void) {
    char prefix[128], config[1024];
    fresh_prefix(prefix, sizeof prefix, "clock");
    snprintf(config, sizeof config,
             "[scopes.\"%s\"]\n"
             "limits = [{ dimension = \"requests\", amount = 100, window = \"1m\" }]\n"
             "[scopes.\"tenants/*\"]\n"
             "limits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n"
             "[redis]\nprefix = \"%s\"\nexpected_processes = 1\ntimeout = \"2s\"\n"
             "[redis.scopes.\"%s\"]\nmode = \"exact\"\n",
             SCOPE, prefix, SCOPE);
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_redis_governor *gov = NULL;
    CHECK_OK(llmgov_redis_governor_from_toml(config, clock, &gov));
    const char *paths[] = {"tenants/acme", SCOPE};
    uint64_t route = 0;
    CHECK_OK(llmgov_redis_governor_route(gov, paths, 2, &route));
    llmgov_redis_permit *permit = NULL;
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit));
    CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){10, 0, 10}));
    llmgov_redis_permit_free(permit);
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK_STR(e.scope, "tenants/acme");
    CHECK(e.retry_after_ms == 60000); /* exactly the manual clock's minute */
    /* On the manual clock, a timeout passes only as the clock does: a
     * predicted minute past a 1 s timeout is refused at once. */
    CHECK_RESULT(llmgov_redis_governor_acquire(gov, route, 10, 0, 10, 1000 * MS, NULL, &permit),
                 LLMGOV_RESULT_DEADLINE_EXCEEDED);
    CHECK(last_error().waited_ns == 0);
    /* The snapshot and metrics are the local engine's: the tenant's scope,
     * not the shared one. */
    char *json = NULL;
    CHECK_OK(llmgov_redis_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"path\":\"tenants/acme\"");
    CHECK(json != NULL && strstr(json, "gpt-4o") == NULL);
    llmgov_string_free(json);
    CHECK_OK(llmgov_redis_governor_metrics_json(gov, &json));
    CHECK_CONTAINS(json, "\"rate_limited\":2");
    CHECK_CONTAINS(json, "\"refusals\":[");
    llmgov_string_free(json);
    CHECK_RESULT(llmgov_redis_governor_metrics_json(NULL, &json), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(llmgov_redis_governor_snapshot_json(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_json");
    CHECK_OK(llmgov_manual_clock_advance(clock, 60000 * MS));
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit));
    CHECK_OK(llmgov_redis_permit_cancel(permit));
    llmgov_redis_permit_free(permit);
    llmgov_manual_clock_free(clock); /* the governor keeps its own reference */
    llmgov_redis_governor_free(gov);
}

/* Leased mode, from JSON: two governors on one prefix admit at most the
 * limit from the leases they take, and give the unused part back. */
static void leased_mode_from_json_stays_within_the_limit(void) {
    char prefix[128], config[1024];
    fresh_prefix(prefix, sizeof prefix, "leased");
    snprintf(config, sizeof config,
             "{\"scopes\": {\"%s\": {\"limits\": [{\"dimension\": \"requests\", \"amount\": 10, \"window\": \"1m\"}]}},"
             " \"redis\": {\"prefix\": \"%s\", \"expected_processes\": 2, \"timeout\": \"2s\","
             " \"scopes\": {\"%s\": {\"mode\": \"leased\"}}}}",
             SCOPE, prefix, SCOPE);
    const llmgov_redis_governor *a = NULL, *b = NULL;
    CHECK_OK(llmgov_redis_governor_from_json(config, NULL, &a));
    CHECK_OK(llmgov_redis_governor_from_json(config, NULL, &b));
    uint64_t route_a = 0, route_b = 0;
    CHECK_OK(llmgov_redis_governor_route(a, &SCOPE, 1, &route_a));
    CHECK_OK(llmgov_redis_governor_route(b, &SCOPE, 1, &route_b));
    int admitted = 0;
    for (int i = 0; i < 30; i++) {
        llmgov_redis_permit *permit = NULL;
        if (llmgov_redis_governor_try_acquire(i % 2 ? b : a, i % 2 ? route_b : route_a, 1, 0, 1, &permit) ==
            LLMGOV_RESULT_OK) {
            admitted++;
            CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){1, 0, 1}));
            llmgov_redis_permit_free(permit);
        }
    }
    CHECK(admitted >= 5 && admitted <= 10);
    CHECK_OK(llmgov_redis_governor_return_leases(a));
    CHECK_OK(llmgov_redis_governor_return_leases(b));
    llmgov_redis_governor_free(a);
    llmgov_redis_governor_free(b);
}

/* llmgov_redis_permit_report feeds a provider's answer into the local
 * scopes of the permit's route: a 429's retry-after holds the local provider
 * scope (on the manual clock). On a route of shared scopes alone it only
 * classifies. Bad input names the field and writes nothing. */
static void report_holds_the_local_provider_scope(void) {
    char prefix[128], config[1024];
    fresh_prefix(prefix, sizeof prefix, "report");
    snprintf(config, sizeof config,
             "[scopes.\"openai/org\"]\n"
             "provider = true\n"
             "limits = [{ dimension = \"requests\", amount = 1000, window = \"1m\" }]\n"
             "[scopes.\"team\"]\n"
             "limits = [{ dimension = \"tokens\", amount = 100000, window = \"1m\" }]\n"
             "[redis]\nprefix = \"%s\"\nexpected_processes = 2\ntimeout = \"2s\"\n"
             "[redis.scopes.\"team\"]\nmode = \"exact\"\n",
             prefix);
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_redis_governor *gov = NULL;
    CHECK_OK(llmgov_redis_governor_from_toml(config, clock, &gov));
    const char *paths[] = {"team", "openai/org"};
    uint64_t route = 0, shared_only = 0;
    CHECK_OK(llmgov_redis_governor_route(gov, paths, 2, &route));
    CHECK_OK(llmgov_redis_governor_route(gov, paths, 1, &shared_only));

    static const char retry_after[] = "retry-after", thirty[] = "30";
    const llmgov_header headers[] = {
        {(const uint8_t *)retry_after, sizeof retry_after - 1, (const uint8_t *)thirty, sizeof thirty - 1},
    };
    llmgov_redis_permit *permit = NULL;
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit));
    llmgov_classification c;
    memset(&c, 0, sizeof c);
    CHECK_OK(llmgov_redis_permit_report(permit, 429, headers, 1, NULL, 0, &c));
    CHECK(c.limited && c.retryable);
    CHECK(c.kind == LLMGOV_LIMIT_KIND_RATE_LIMITED);
    CHECK(c.has_retry_after && c.retry_after_ms == 30000);
    CHECK_OK(llmgov_redis_permit_cancel(permit));
    llmgov_redis_permit_free(permit);

    /* The local provider scope holds the next request for the retry-after. */
    permit = NULL;
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK_STR(e.scope, "openai/org");
    CHECK(e.retry_after_ms >= 29000);
    CHECK(permit == NULL);
    char *json = NULL;
    CHECK_OK(llmgov_redis_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"admitted_then_provider_rejected\":1");
    llmgov_string_free(json);
    /* The hold is the retry-after and a little more (AIMD slowed the rate). */
    CHECK_OK(llmgov_manual_clock_advance(clock, 31000 * MS));
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, &permit));
    /* A success is classified too, and holds nothing. */
    CHECK_OK(llmgov_redis_permit_report(permit, 200, NULL, 0, NULL, 0, &c));
    CHECK(!c.limited && c.kind == LLMGOV_LIMIT_KIND_NONE);
    CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){10, 0, 5}));
    llmgov_redis_permit_free(permit);

    /* Shared scopes alone: the answer is classified, nothing is fed back,
     * and no error. Reporting after the settle is allowed. */
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, shared_only, 10, 0, 10, &permit));
    CHECK_OK(llmgov_redis_permit_settle(permit, (llmgov_usage){10, 0, 5}));
    memset(&c, 0, sizeof c);
    CHECK_OK(llmgov_redis_permit_report(permit, 429, headers, 1, NULL, 0, &c));
    CHECK(c.limited && c.kind == LLMGOV_LIMIT_KIND_RATE_LIMITED);
    CHECK(c.has_retry_after && c.retry_after_ms == 30000);
    llmgov_redis_permit_free(permit);
    CHECK_OK(llmgov_redis_governor_try_acquire(gov, shared_only, 10, 0, 10, &permit));
    CHECK_OK(llmgov_redis_permit_cancel(permit));

    /* Bad input names the field, and `out` keeps what it held. */
    llmgov_classification untouched;
    memset(&untouched, 0xab, sizeof untouched);
    c = untouched;
    CHECK_RESULT(llmgov_redis_permit_report(NULL, 429, headers, 1, NULL, 0, &c), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "permit");
    CHECK_RESULT(llmgov_redis_permit_report(permit, 1000, headers, 1, NULL, 0, &c), LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "status");
    CHECK_STR(e.value, "1000");
    CHECK_RESULT(llmgov_redis_permit_report(permit, 99, NULL, 0, NULL, 0, &c), LLMGOV_RESULT_INVALID_REQUEST);
    CHECK_STR(last_error().value, "99");
    CHECK_RESULT(llmgov_redis_permit_report(permit, 429, NULL, 1, NULL, 0, &c), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "headers");
    const llmgov_header nameless[] = {{NULL, 3, (const uint8_t *)thirty, sizeof thirty - 1}};
    CHECK_RESULT(llmgov_redis_permit_report(permit, 429, nameless, 1, NULL, 0, &c), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "headers[0].name");
    CHECK_RESULT(llmgov_redis_permit_report(permit, 429, headers, 1, NULL, 5, &c), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "body");
    CHECK_RESULT(llmgov_redis_permit_report(permit, 429, headers, 1, NULL, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out");
    CHECK(memcmp(&c, &untouched, sizeof c) == 0);
    llmgov_redis_permit_free(permit);
    llmgov_manual_clock_free(clock);
    llmgov_redis_governor_free(gov);
}

/* A Redis permit and governor freed from inside a local governor's event
 * callback go once the call that raised the event returns. */
typedef struct {
    llmgov_redis_permit *permit;
    const llmgov_redis_governor *gov;
    int calls;
} frees;

static void free_in_callback(void *userdata, const char *json, size_t len) {
    (void)json;
    (void)len;
    frees *f = userdata;
    f->calls++;
    llmgov_redis_permit_free(f->permit);
    llmgov_redis_governor_free(f->gov);
    f->permit = NULL;
    f->gov = NULL;
}

static void frees_inside_an_event_callback_are_safe(void) {
    uint64_t route = 0;
    frees f = {NULL, governor("callback", TEN_A_MINUTE, &route), 0};
    CHECK_OK(llmgov_redis_governor_try_acquire(f.gov, route, 10, 0, 10, &f.permit));
    const llmgov_governor *local = NULL;
    CHECK_OK(llmgov_governor_from_toml("[scopes.\"p\"]\nlimits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n",
                                       NULL, &local));
    CHECK_OK(llmgov_governor_set_event_hook(local, free_in_callback, &f));
    const char *p = "p";
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(local, &p, 1, &request.route));
    llmgov_permit *first = NULL, *second = NULL;
    CHECK_OK(llmgov_governor_try_acquire(local, &request, &first));
    CHECK_RESULT(llmgov_governor_try_acquire(local, &request, &second), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(f.calls == 1 && f.permit == NULL && f.gov == NULL);
    llmgov_permit_free(first);
    llmgov_governor_free(local);
}

static void bad_input_names_the_field(void) {
    const llmgov_redis_governor *gov = (const llmgov_redis_governor *)0x1;
    CHECK_RESULT(redis_governor("c-bad", "{ dimension = \"requests\", amount = 0, window = \"1m\" }", &gov),
                 LLMGOV_RESULT_INVALID_CONFIG);
    CHECK_STR(last_error().field, "scopes.openai/org/gpt-4o.limits[0].amount");
    CHECK_RESULT(redis_governor("bad prefix!", TEN_A_MINUTE, &gov), LLMGOV_RESULT_INVALID_CONFIG);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "invalid_config");
    CHECK_STR(e.field, "redis.prefix");
    CHECK_STR(e.value, "bad prefix!");
    const char *no_section = "[scopes.\"p\"]\nlimits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n";
    CHECK_RESULT(llmgov_redis_governor_from_toml(no_section, NULL, &gov), LLMGOV_RESULT_INVALID_CONFIG);
    CHECK_STR(last_error().field, "redis");
    CHECK_RESULT(llmgov_redis_governor_from_json("{\"redis\": {\"prefix\": \"x\", \"expected_processes\": \"two\"}}",
                                                 NULL, &gov),
                 LLMGOV_RESULT_INVALID_CONFIG);
    e = last_error();
    CHECK_STR(e.field, "redis.expected_processes");
    CHECK_STR(e.value, "two");
    CHECK_RESULT(llmgov_redis_governor_from_json("{", NULL, &gov), LLMGOV_RESULT_INVALID_CONFIG);
    CHECK_STR(last_error().field, "json");
    CHECK_RESULT(llmgov_redis_governor_from_toml(NULL, NULL, &gov), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "toml");
    CHECK_RESULT(redis_governor("c-bad", TEN_A_MINUTE, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_governor");
    CHECK(gov == (const llmgov_redis_governor *)0x1);

    uint64_t route = 0;
    gov = governor("bad", TEN_A_MINUTE, &route);
    const char *paths[] = {SCOPE, NULL};
    uint64_t other = 0;
    CHECK_RESULT(llmgov_redis_governor_route(gov, paths, 2, &other), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "paths[1]");
    const char *unknown = "anthropic";
    CHECK_RESULT(llmgov_redis_governor_route(gov, &unknown, 1, &other), LLMGOV_RESULT_UNKNOWN_SCOPE);
    CHECK_STR(last_error().scope, "anthropic");
    CHECK_RESULT(llmgov_redis_governor_route(NULL, paths, 1, &other), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    uint64_t again = 0;
    CHECK_OK(llmgov_redis_governor_route(gov, paths, 1, &again));
    CHECK(again == route);

    llmgov_redis_permit *permit = (llmgov_redis_permit *)0x1;
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, 0, 10, 0, 10, &permit), LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "route");
    CHECK_STR(e.value, "0");
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 10, 0, (1ull << 40) + 1, &permit),
                 LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "max_output_tokens");
    CHECK_STR(e.value, "1099511627777");
    CHECK_RESULT(llmgov_redis_governor_acquire(gov, route, 10, 11, 10, LLMGOV_NO_TIMEOUT, NULL, &permit),
                 LLMGOV_RESULT_INVALID_REQUEST);
    CHECK_STR(last_error().field, "cached_input_tokens");
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, route, 10, 0, 10, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_permit");
    CHECK_RESULT(llmgov_redis_governor_acquire(NULL, route, 10, 0, 10, 0, NULL, &permit), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK_RESULT(llmgov_redis_permit_settle(NULL, (llmgov_usage){0, 0, 0}), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "permit");
    CHECK_RESULT(llmgov_redis_permit_cancel(NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(llmgov_redis_governor_health_json(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_json");
    CHECK_RESULT(llmgov_redis_governor_return_leases(NULL), LLMGOV_RESULT_NULL_ARGUMENT);

    /* A local governor's route is another governor's. */
    const llmgov_governor *local = NULL;
    CHECK_OK(llmgov_governor_from_toml("[scopes.\"p\"]\nlimits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n",
                                       NULL, &local));
    const char *p = "p";
    uint64_t local_route = 0;
    CHECK_OK(llmgov_governor_route(local, &p, 1, &local_route));
    CHECK_RESULT(llmgov_redis_governor_try_acquire(gov, local_route, 10, 0, 10, &permit), LLMGOV_RESULT_INVALID_REQUEST);
    CHECK_CONTAINS(last_error().message, "belongs to another governor");
    CHECK(permit == (llmgov_redis_permit *)0x1);
    llmgov_governor_free(local);

    llmgov_redis_permit_free(NULL);
    llmgov_redis_governor_free(NULL);
    llmgov_redis_governor_free(gov);
}

int main(void) {
    const char *url = getenv("LLMGOV_REDIS_URL");
    if (url == NULL || *url == '\0') {
        printf("redis: skipped: LLMGOV_REDIS_URL is not set (`make test-c` starts a redis-server)\n");
        return 0;
    }
    two_governors_share_one_limit_exactly();
    settle_refunds_and_a_permit_reconciles_once();
    cancel_frees_a_slot();
    a_blocking_acquire_waits_for_a_drained_bucket();
    a_predicted_wait_past_the_timeout_is_refused_at_once();
    a_cancel_token_stops_a_wait_on_a_held_slot();
    local_scopes_follow_a_manual_clock();
    leased_mode_from_json_stays_within_the_limit();
    report_holds_the_local_provider_scope();
    frees_inside_an_event_callback_are_safe();
    bad_input_names_the_field();
    return finish("redis");
}
