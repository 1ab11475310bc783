/* The governor through the C ABI: construction, routing, admission and its
 * refusals, reconciliation, expiry, provider feedback, snapshots, all on a
 * manual clock. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define MS 1000000ull /* nanoseconds */

/* The tenant's tokens refill one every 60 ms (1000 a minute); its
 * concurrency is 2. Permits expire 17 s after the second they were taken. */
static const char *CONFIG =
    "permit_ttl = \"16s\"\n"
    "[scopes.\"openai/org/gpt-4o\"]\n"
    "provider = true\n"
    "limits = [\n"
    "  { dimension = \"requests\", amount = 600, window = \"1m\" },\n"
    "  { dimension = \"tokens\", amount = 6000, window = \"1m\" },\n"
    "]\n"
    "[scopes.\"tenants/*\"]\n"
    "limits = [\n"
    "  { dimension = \"tokens\", amount = 1000, window = \"1m\" },\n"
    "  { dimension = \"concurrency\", amount = 2 },\n"
    "]\n";

static const llmgov_governor *governor_at_zero(llmgov_manual_clock **clock) {
    *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, *clock, &gov));
    CHECK(gov != NULL);
    return gov;
}

static uint64_t route_of(const llmgov_governor *gov, const char *tenant) {
    const char *paths[] = {tenant, "openai/org/gpt-4o"};
    uint64_t route = UINT64_MAX;
    CHECK_OK(llmgov_governor_route(gov, paths, 2, &route));
    return route;
}

static void admission_refusal_and_refund(void) {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov = governor_at_zero(&clock);
    uint64_t route = route_of(gov, "tenants/acme");
    CHECK(route_of(gov, "tenants/acme") == route); /* interned once */
    CHECK(route_of(gov, "tenants/zeta") != route);

    llmgov_request request = {0};
    request.route = route;
    request.input_tokens = 500;
    request.max_output_tokens = 300;
    llmgov_permit *first = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &first));
    CHECK(first != NULL);
    llmgov_usage charged = {0};
    CHECK_OK(llmgov_permit_get_charged(first, &charged));
    CHECK(charged.input_tokens == 500 && charged.output_tokens == 300);

    /* 800 of 1000 taken: 500 more is 18 s early (tat 48 s + 30 s - 60 s). */
    request.max_output_tokens = 0;
    llmgov_permit *second = (llmgov_permit *)0x1; /* must stay untouched */
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &second), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(second == (llmgov_permit *)0x1);
    llmgov_error e = last_error();
    CHECK(e.result == LLMGOV_RESULT_RATE_LIMITED);
    CHECK_STR(e.code, "rate_limited");
    CHECK_STR(e.scope, "tenants/acme");
    CHECK(e.dimension == LLMGOV_DIMENSION_TOKENS);
    CHECK_STR(llmgov_dimension_name(e.dimension), "tokens");
    CHECK_STR(llmgov_dimension_name(LLMGOV_DIMENSION_NONE), "none");
    CHECK_STR(llmgov_dimension_name(LLMGOV_DIMENSION_INPUT_TOKENS), "input_tokens");
    CHECK(llmgov_dimension_name(99) == NULL);
    CHECK(e.has_retry_after);
    CHECK(e.retry_after_ms == 18000);
    CHECK(e.retry_after_ns == 18000 * MS);
    CHECK_CONTAINS(e.message, "tenants/acme");

    /* Settling 200 output tokens low refunds them: now 6 s early. */
    llmgov_usage actual = {500, 0, 100};
    CHECK_OK(llmgov_permit_settle(first, actual));
    llmgov_permit_state state = LLMGOV_PERMIT_STATE_PENDING;
    CHECK_OK(llmgov_permit_get_state(first, &state));
    CHECK(state == LLMGOV_PERMIT_STATE_SETTLED);
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &second), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(last_error().retry_after_ms == 6000);

    CHECK_OK(llmgov_manual_clock_advance(clock, 6000 * MS - 1));
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &second), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(last_error().retry_after_ns == 1);
    CHECK_OK(llmgov_manual_clock_advance(clock, 1));
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &second));
    CHECK_OK(llmgov_permit_cancel(second));
    CHECK_OK(llmgov_permit_get_state(second, &state));
    CHECK(state == LLMGOV_PERMIT_STATE_CANCELLED);

    /* More than the tenant's burst can never pass: said at once. */
    request.input_tokens = 5000;
    llmgov_permit *never = NULL;
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &never), LLMGOV_RESULT_NEVER_FITS);
    e = last_error();
    CHECK_STR(e.code, "never_fits");
    CHECK_STR(e.scope, "tenants/acme");
    CHECK(e.dimension == LLMGOV_DIMENSION_TOKENS);
    CHECK(e.cost == 5000 && e.burst == 1000);
    CHECK(!e.has_retry_after);
    CHECK(never == NULL);

    char *json = NULL;
    CHECK_OK(llmgov_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"admitted\":2,\"rate_limited\":3,\"never_fits\":1");
    CHECK_CONTAINS(json, "\"path\":\"tenants/acme\"");
    llmgov_string_free(json);

    llmgov_permit_free(first);
    llmgov_permit_free(second);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

static void concurrency_waits_on_a_release(void) {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov = governor_at_zero(&clock);
    llmgov_request request = {0};
    request.route = route_of(gov, "tenants/busy");
    llmgov_permit *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &a));
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &b));
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &c), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK(e.dimension == LLMGOV_DIMENSION_CONCURRENCY);
    CHECK(!e.has_retry_after); /* waits on a release, not on time */
    CHECK_OK(llmgov_permit_settle(b, (llmgov_usage){0, 0, 0}));
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &c));
    CHECK_OK(llmgov_permit_cancel(a));
    CHECK_OK(llmgov_permit_cancel(c));
    llmgov_permit_free(a);
    llmgov_permit_free(b);
    llmgov_permit_free(c);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

static void expiry_and_streamed_output(void) {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov = governor_at_zero(&clock);
    llmgov_request request = {0};
    request.route = route_of(gov, "tenants/slow");
    request.max_output_tokens = 100;
    llmgov_permit *streamed = NULL, *forgotten = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &streamed));
    CHECK_OK(llmgov_permit_add_output(streamed, 60));
    CHECK_OK(llmgov_permit_add_output(streamed, 90));
    llmgov_usage charged = {0};
    CHECK_OK(llmgov_permit_get_charged(streamed, &charged));
    CHECK(charged.output_tokens == 150); /* raised to what streamed */
    CHECK_OK(llmgov_permit_settle(streamed, (llmgov_usage){0, 0, 150}));

    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &forgotten));
    CHECK_OK(llmgov_manual_clock_advance(clock, 17000 * MS));
    uint64_t now = 0;
    CHECK_OK(llmgov_governor_now(gov, &now));
    CHECK(now == 17000 * MS);
    CHECK_RESULT(llmgov_permit_settle(forgotten, (llmgov_usage){0, 0, 0}), LLMGOV_RESULT_PERMIT_EXPIRED);
    CHECK_STR(last_error().code, "permit_expired");
    CHECK_RESULT(llmgov_permit_cancel(forgotten), LLMGOV_RESULT_PERMIT_EXPIRED);
    llmgov_permit_state state = LLMGOV_PERMIT_STATE_PENDING;
    CHECK_OK(llmgov_permit_get_state(forgotten, &state));
    CHECK(state == LLMGOV_PERMIT_STATE_EXPIRED);

    char *json = NULL;
    CHECK_OK(llmgov_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"expired_permits\":1");
    llmgov_string_free(json);
    llmgov_permit_free(streamed);
    llmgov_permit_free(forgotten);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

static void a_reported_429_holds_the_provider_bucket(void) {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov = governor_at_zero(&clock);
    llmgov_request request = {0};
    request.route = route_of(gov, "tenants/acme");
    request.input_tokens = 10;
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit));

    static const char retry[] = "retry-after", twenty[] = "20";
    static const char remaining[] = "x-ratelimit-remaining-tokens", zero[] = "0";
    llmgov_header headers[] = {
        {(const uint8_t *)retry, sizeof retry - 1, (const uint8_t *)twenty, sizeof twenty - 1},
        {(const uint8_t *)remaining, sizeof remaining - 1, (const uint8_t *)zero, sizeof zero - 1},
    };
    static const char body[] =
        "{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}";
    llmgov_classification c;
    CHECK_OK(llmgov_permit_report(permit, 429, headers, 2, (const uint8_t *)body, sizeof body - 1, &c));
    CHECK(c.limited && c.retryable);
    CHECK(c.kind == LLMGOV_LIMIT_KIND_RATE_LIMITED);
    CHECK(c.dimension == LLMGOV_LIMIT_DIMENSION_TOKENS);
    CHECK(c.has_retry_after && c.retry_after_ms == 20000);
    CHECK(c.provider == LLMGOV_PROVIDER_OPENAI);
    CHECK(c.has_remaining[LLMGOV_LIMIT_DIMENSION_TOKENS] && c.remaining[LLMGOV_LIMIT_DIMENSION_TOKENS] == 0);
    CHECK(!c.has_remaining[LLMGOV_LIMIT_DIMENSION_REQUESTS]);
    CHECK_OK(llmgov_permit_cancel(permit));
    llmgov_permit_free(permit);

    /* The provider's tokens are held empty: another tenant is refused on it. */
    request.route = route_of(gov, "tenants/other");
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK_STR(e.scope, "openai/org/gpt-4o");
    CHECK(e.dimension == LLMGOV_DIMENSION_TOKENS);
    char *json = NULL;
    CHECK_OK(llmgov_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"admitted_then_provider_rejected\":1");
    llmgov_string_free(json);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
}

static void json_presets_classes_and_scopes(void) {
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_json(
        "{\"scopes\":{\"a/b\":{\"limits\":[{\"dimension\":\"requests\",\"amount\":1,\"window\":\"1h\"}]}}}", NULL, &gov));
    const char *path = "a/b/c";
    uint64_t route = 0;
    uint64_t scope = 0;
    uint64_t batch = 0, again = 0;
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &route));
    CHECK_OK(llmgov_governor_class(gov, "batch", &batch));
    CHECK_OK(llmgov_governor_class(gov, "batch", &again));
    CHECK(batch == again && batch != 0);
    llmgov_request request = {0};
    request.route = route;
    request.class_id = batch;
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit)); /* the real clock */
    CHECK_RESULT(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(last_error().retry_after_ms > 3590000); /* one an hour */

    CHECK_OK(llmgov_governor_scope(gov, "a/b", &scope));
    char *json = NULL;
    CHECK_OK(llmgov_governor_scope_snapshot_json(gov, scope, &json));
    CHECK_CONTAINS(json, "{\"path\":\"a/b\",\"limits\":[{\"dimension\":\"requests\"");
    CHECK_CONTAINS(json, "\"in_use\":1,\"reserved\":1,\"used\":0");
    llmgov_string_free(json);
    /* Governors are independent: this one's numbers mean nothing to another. */
    const llmgov_governor *preset = NULL;
    CHECK_OK(llmgov_governor_from_preset("openai-gpt-4o-tier1", NULL, &preset));
    CHECK_RESULT(llmgov_governor_scope_snapshot_json(preset, scope + 1000, &json), LLMGOV_RESULT_INVALID_REQUEST);
    CHECK_STR(last_error().field, "scope");

    /* The governor freed first: the permit keeps it alive, and still settles. */
    llmgov_governor_free(gov);
    CHECK_OK(llmgov_permit_settle(permit, (llmgov_usage){0, 0, 0}));
    llmgov_permit_free(permit);
    llmgov_governor_free(preset);
}

static void bad_configs_name_the_field_and_value(void) {
    const llmgov_governor *gov = (const llmgov_governor *)0x1;
    CHECK_RESULT(llmgov_governor_from_toml(
                     "[scopes.\"x\"]\nlimits = [{ dimension = \"tokens\", amount = 0, window = \"1m\" }]\n", NULL, &gov),
                 LLMGOV_RESULT_INVALID_CONFIG);
    CHECK(gov == (const llmgov_governor *)0x1);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "invalid_config");
    CHECK_CONTAINS(e.field, "limits[0].amount");
    CHECK_STR(e.value, "0");
    CHECK_CONTAINS(e.message, "limits[0].amount");

    CHECK_RESULT(llmgov_governor_from_toml("[scopes.\"x\"]\nlimits = [{ dimension = \"tokens\", amount = 5, "
                                           "window = \"soon\" }]\n",
                                           NULL, &gov),
                 LLMGOV_RESULT_INVALID_CONFIG);
    CHECK_STR(last_error().value, "soon");
    CHECK_RESULT(llmgov_governor_from_json("{\"scopes\": 7}", NULL, &gov), LLMGOV_RESULT_INVALID_CONFIG);
    CHECK_RESULT(llmgov_governor_from_preset("no-such-preset", NULL, &gov), LLMGOV_RESULT_UNKNOWN_PRESET);
    e = last_error();
    CHECK_STR(e.value, "no-such-preset");
    CHECK_CONTAINS(e.message, "openai-gpt-4o-tier1"); /* lists the known ones */
    CHECK(gov == (const llmgov_governor *)0x1);
}

int main(void) {
    CHECK(last_error().result == LLMGOV_RESULT_OK); /* nothing failed yet */
    CHECK_STR(llmgov_version(), "0.1.0");
    admission_refusal_and_refund();
    concurrency_waits_on_a_release();
    expiry_and_streamed_output();
    a_reported_429_holds_the_provider_bucket();
    json_presets_classes_and_scopes();
    bad_configs_name_the_field_and_value();
    return finish("c-governor");
}
