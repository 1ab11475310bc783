/* The Prometheus text exposition and the metrics JSON from C, on a manual
 * clock (as core/tests/prometheus.rs): per scope and dimension limits, the
 * effective limit after AIMD, reserved and used; the admission counters and
 * the breaker; refusals by dimension and gateway_decision; the estimate
 * error; retry amplification; the queues' depth, oldest waiter, wait
 * histogram and borrowed tokens; expired permits. llmgov_governor_metrics_json
 * carries the same figures. A NULL argument is an error naming it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "waiting.h"

#define SECOND 1000000000ull

/* The value on the line that starts with `series` (exactly), or -1. */
static double value_of(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, series, n) == 0 && line[n] == ' ') return strtod(line + n + 1, NULL);
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    fprintf(stderr, "no series %s in:\n%s\n", series, text);
    return -1;
}

static char *prometheus(const llmgov_governor *gov) {
    char *text = NULL;
    CHECK_OK(llmgov_governor_prometheus(gov, &text));
    return text;
}

static char *metrics(const llmgov_governor *gov) {
    char *json = NULL;
    CHECK_OK(llmgov_governor_metrics_json(gov, &json));
    return json;
}

static void limits_counters_and_the_breaker(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml("[adaptive.breaker]\n"
                                       "failures = 1\n"
                                       "pauses = [\"30s\"]\n"
                                       "[scopes.\"openai/org\"]\n"
                                       "provider = true\n"
                                       "limits = [{ dimension = \"requests\", amount = 500, window = \"1m\" },\n"
                                       "          { dimension = \"tokens\", amount = 30000, window = \"1m\" }]\n"
                                       "[scopes.\"tenants/*\"]\n"
                                       "limits = [{ dimension = \"concurrency\", amount = 2 }]\n",
                                       clock, &gov));
    const char *paths[] = {"tenants/acme", "openai/org"};
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &request.route));
    request.input_tokens = 6000;
    llmgov_permit *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &a));
    request.input_tokens = 100;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &b));
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &c), LLMGOV_RESULT_RATE_LIMITED); /* 2 in flight */
    llmgov_classification classified;
    CHECK_OK(llmgov_permit_report(b, 503, NULL, 0, NULL, 0, &classified)); /* opens the breaker */

    char *text = prometheus(gov);
    const char *tokens = "{scope=\"openai/org\",dimension=\"tokens\",window_ms=\"60000\"}";
    char series[160];
    snprintf(series, sizeof series, "llmgov_limit%s", tokens);
    CHECK(value_of(text, series) == 30000);
    snprintf(series, sizeof series, "llmgov_in_use%s", tokens);
    CHECK(value_of(text, series) == 6100);
    CHECK(value_of(text, "llmgov_utilisation{scope=\"tenants/acme\",dimension=\"concurrency\",window_ms=\"none\"}") ==
          1.0);
    CHECK(value_of(text, "llmgov_admitted_total") == 2);
    CHECK(value_of(text, "llmgov_rate_limited_total") == 1);
    CHECK(value_of(text, "llmgov_breaker{scope=\"openai/org\",state=\"open\"}") == 1);
    CHECK_CONTAINS(text, "# TYPE llmgov_limit gauge");
    CHECK_CONTAINS(text, "# EOF");
    llmgov_string_free(text);
    char *json = metrics(gov);
    CHECK_CONTAINS(json, "\"breaker\":\"open\"");
    llmgov_string_free(json);

    /* Settling shows at once. */
    CHECK_OK(llmgov_permit_settle(a, (llmgov_usage){1000, 0, 0}));
    text = prometheus(gov);
    snprintf(series, sizeof series, "llmgov_in_use%s", tokens);
    CHECK(value_of(text, series) == 1100);
    llmgov_string_free(text);

    llmgov_permit_free(a);
    llmgov_permit_free(b);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

/* A provider 429 on tokens with AIMD at 0.75, a local refusal on a
 * tenant's concurrency, one exact estimate: the effective limit, reserved
 * and used, refusals by who refused, the estimate error and amplification. */
static void aimd_refusals_estimates_and_amplification(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_json(
        "{\"adaptive\":{\"decrease\":0.75},\"scopes\":{"
        "\"openai/org\":{\"provider\":true,\"limits\":["
        "{\"dimension\":\"requests\",\"amount\":500,\"window\":\"1m\"},"
        "{\"dimension\":\"tokens\",\"amount\":30000,\"window\":\"1m\"},"
        "{\"dimension\":\"tokens\",\"amount\":1000000,\"window\":\"1d\"}]},"
        "\"tenants/*\":{\"limits\":[{\"dimension\":\"concurrency\",\"amount\":2}]}}}",
        clock, &gov));
    const char *paths[] = {"tenants/acme", "openai/org"};
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &request.route));
    request.input_tokens = 6000;
    llmgov_permit *sent = NULL, *held = NULL, *refused = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &sent));
    request.input_tokens = 100;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &held));
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &refused), LLMGOV_RESULT_RATE_LIMITED);
    static const char body[] = "{\"error\":{\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}";
    llmgov_header retry = {(const uint8_t *)"retry-after", 11, (const uint8_t *)"2", 1};
    llmgov_classification classified;
    CHECK_OK(llmgov_permit_report(sent, 429, &retry, 1, (const uint8_t *)body, sizeof body - 1, &classified));
    CHECK_OK(llmgov_permit_settle(sent, (llmgov_usage){6000, 0, 0}));
    CHECK_OK(llmgov_manual_clock_advance(clock, 2 * SECOND));

    char *text = prometheus(gov);
    CHECK(value_of(text, "llmgov_limit{scope=\"openai/org\",dimension=\"tokens\",window_ms=\"60000\"}") == 30000);
    CHECK(value_of(text, "llmgov_limit_effective{scope=\"openai/org\",dimension=\"tokens\",window_ms=\"60000\"}") ==
          22500); /* AIMD took it to 0.75 */
    const char *daily = "{scope=\"openai/org\",dimension=\"tokens\",window_ms=\"86400000\"}";
    char series[160];
    snprintf(series, sizeof series, "llmgov_in_use%s", daily);
    CHECK(value_of(text, series) == 6077); /* 6100 less 2 s of 1M a day */
    snprintf(series, sizeof series, "llmgov_reserved%s", daily);
    CHECK(value_of(text, series) == 100); /* the permit still held */
    snprintf(series, sizeof series, "llmgov_used%s", daily);
    CHECK(value_of(text, series) == 5977);
    CHECK(value_of(text, "llmgov_reserved{scope=\"tenants/acme\",dimension=\"concurrency\",window_ms=\"none\"}") == 1);
    CHECK(value_of(text, "llmgov_refusals_total{dimension=\"concurrency\",gateway_decision=\"rejected_locally\"}") ==
          1);
    CHECK(value_of(text, "llmgov_refusals_total{dimension=\"tokens\","
                         "gateway_decision=\"admitted_then_provider_rejected\"}") == 1);
    CHECK(value_of(text, "llmgov_refusals_total{dimension=\"requests\",gateway_decision=\"rejected_locally\"}") == 0);
    CHECK(value_of(text, "llmgov_provider_rejected_total") == 1);
    /* One of two admitted was refused by the provider: two sent per success. */
    CHECK(value_of(text, "llmgov_retry_amplification") == 2.0);
    /* The estimate was exact. */
    CHECK(value_of(text, "llmgov_estimate_error{route=\"openai/org\",side=\"input\",quantile=\"0.5\"}") == 0.0);
    CHECK(value_of(text, "llmgov_estimate_samples_total{route=\"openai/org\",side=\"input\"}") == 1);
    llmgov_string_free(text);

    /* The same figures in the metrics JSON. */
    char *json = metrics(gov);
    CHECK_CONTAINS(json, "{\"snapshot\":{\"now_ms\":2000,\"admitted\":2,\"rate_limited\":1,");
    CHECK_CONTAINS(json, "\"effective_amount\":22500");
    CHECK_CONTAINS(json, "\"queues\":{\"depth\":0,\"classes\":[]}");
    CHECK_CONTAINS(json, "{\"dimension\":\"concurrency\",\"gateway_decision\":\"rejected_locally\",\"count\":1}");
    CHECK_CONTAINS(json, "{\"dimension\":\"tokens\",\"gateway_decision\":\"admitted_then_provider_rejected\","
                         "\"count\":1}");
    CHECK_CONTAINS(json, "{\"dimension\":\"requests\",\"gateway_decision\":\"rejected_locally\",\"count\":0}");
    CHECK_CONTAINS(json, "\"estimate_errors\":[{\"scopes\":[\"openai/org\"],\"side\":\"input\",\"samples\":1,"
                         "\"p05\":0.0,\"p50\":0.0,\"p95\":0.0}");
    CHECK_CONTAINS(json, "\"retry_amplification\":2.0}");
    llmgov_string_free(json);

    llmgov_permit_free(sent);
    llmgov_permit_free(held);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

/* One request a minute: a permit held past its TTL expires, and a waiter
 * queues behind it, seen while it waits and after it passes. */
static void queue_depth_oldest_waiter_and_expiries(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml("permit_ttl = \"1m\"\n"
                                       "[scopes.p]\n"
                                       "limits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n",
                                       clock, &gov));
    const char *path = "p";
    waiter w = {gov, {0}, 0, LLMGOV_RESULT_PANIC, NULL};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &w.request.route));
    llmgov_permit *forgotten = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &w.request, &forgotten));
    CHECK(pthread_create(&w.thread, NULL, wait_for_admission, &w) == 0);
    until_waiting(gov, 1);
    CHECK_OK(llmgov_manual_clock_advance(clock, 1500 * SECOND / 1000));

    char *text = prometheus(gov);
    CHECK(value_of(text, "llmgov_queue_depth{class=\"\"}") == 1);
    CHECK(value_of(text, "llmgov_queue_oldest_wait_seconds{class=\"\"}") == 1.5);
    CHECK(value_of(text, "llmgov_expired_permits_total") == 0); /* not yet */
    llmgov_string_free(text);
    char *json = metrics(gov);
    CHECK_CONTAINS(json, "\"queues\":{\"depth\":1,\"classes\":[{\"class\":\"\",");
    CHECK_CONTAINS(json, "\"oldest_wait_ms\":1500");
    llmgov_string_free(json);

    /* Past the window the waiter passes; past the TTL the first expires. */
    CHECK_OK(llmgov_manual_clock_advance(clock, 120 * SECOND));
    uint64_t next = 0;
    CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
    CHECK(pthread_join(w.thread, NULL) == 0);
    CHECK(w.result == LLMGOV_RESULT_OK && w.permit != NULL);
    text = prometheus(gov);
    CHECK(value_of(text, "llmgov_queue_depth{class=\"\"}") == 0);
    CHECK(value_of(text, "llmgov_queue_oldest_wait_seconds{class=\"\"}") == 0);
    CHECK(value_of(text, "llmgov_expired_permits_total") == 1);
    llmgov_string_free(text);
    json = metrics(gov);
    CHECK_CONTAINS(json, "\"expired_permits\":1,");
    llmgov_string_free(json);

    llmgov_permit_free(forgotten);
    llmgov_permit_free(w.permit);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

/* A tenant guaranteed 100 tokens a minute: its first 100 are its own, what
 * it gets past them is borrowed. Two waiters pass after 1 s and 2 s. */
static void waits_and_borrowed_tokens_per_class(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_json(
        "{\"scopes\":{\"p\":{\"limits\":[{\"dimension\":\"requests\",\"amount\":1,\"window\":\"1s\"}]},"
        "\"tenants/*\":{\"limits\":[{\"dimension\":\"concurrency\",\"amount\":10}]}},"
        "\"shares\":{\"tenants/*\":{\"guarantee\":100,\"window\":\"1m\"}}}",
        clock, &gov));
    const char *paths[] = {"tenants/acme", "p"};
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &request.route));
    request.input_tokens = 100;
    llmgov_permit *first = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &first));
    waiter waiting[2];
    for (int i = 0; i < 2; i++) {
        waiting[i] = (waiter){gov, request, 0, LLMGOV_RESULT_PANIC, NULL};
        CHECK(pthread_create(&waiting[i].thread, NULL, wait_for_admission, &waiting[i]) == 0);
    }
    until_waiting(gov, 2);
    for (int i = 0; i < 2; i++) {
        uint64_t next = 0;
        CHECK_OK(llmgov_manual_clock_advance(clock, SECOND));
        CHECK_OK(llmgov_governor_wake_waiters(gov, &next));
        until_waiting(gov, 1 - i);
    }
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_join(waiting[i].thread, NULL) == 0);
        CHECK(waiting[i].result == LLMGOV_RESULT_OK);
    }

    char *text = prometheus(gov);
    CHECK_CONTAINS(text, "# TYPE llmgov_queue_wait_seconds histogram");
    CHECK(value_of(text, "llmgov_queue_wait_seconds_bucket{le=\"0.5\",class=\"\"}") == 0);
    CHECK(value_of(text, "llmgov_queue_wait_seconds_bucket{le=\"1.0\",class=\"\"}") == 1);
    CHECK(value_of(text, "llmgov_queue_wait_seconds_bucket{le=\"2.5\",class=\"\"}") == 2);
    CHECK(value_of(text, "llmgov_queue_wait_seconds_count{class=\"\"}") == 2);
    CHECK(value_of(text, "llmgov_queue_wait_seconds_sum{class=\"\"}") == 3.0);
    CHECK(value_of(text, "llmgov_queue_borrowed_tokens_total{class=\"\"}") == 100); /* the second one's */
    llmgov_string_free(text);
    char *json = metrics(gov);
    CHECK_CONTAINS(json, "\"wait\":{\"counts\":[0,0,0,0,0,0,0,0,1,1,0,0,0,0,0],\"sum_ns\":3000000000}");
    CHECK_CONTAINS(json, "\"borrowed_tokens\":100}");
    llmgov_string_free(json);

    llmgov_permit_free(first);
    for (int i = 0; i < 2; i++) llmgov_permit_free(waiting[i].permit);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

/* Bad input: nothing written, the argument named. */
static void null_arguments_are_named(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml("[scopes.p]\nlimits = [{ dimension = \"requests\", amount = 1, window = \"1s\" }]\n",
                                       clock, &gov));
    char *text = (char *)0x1;
    CHECK_RESULT(llmgov_governor_prometheus(NULL, &text), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK(text == (char *)0x1);
    CHECK_RESULT(llmgov_governor_prometheus(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    llmgov_error e = last_error();
    CHECK_STR(e.field, "out_text");
    CHECK_CONTAINS(e.message, "out_text");
    CHECK_RESULT(llmgov_governor_metrics_json(NULL, &text), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK(text == (char *)0x1);
    CHECK_RESULT(llmgov_governor_metrics_json(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_json");
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

int main(void) {
    limits_counters_and_the_breaker();
    aimd_refusals_estimates_and_amplification();
    queue_depth_oldest_waiter_and_expiries();
    waits_and_borrowed_tokens_per_class();
    null_arguments_are_named();
    return finish("prometheus");
}
