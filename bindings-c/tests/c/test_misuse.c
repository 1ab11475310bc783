/* Misuse of the C ABI: NULL arguments, invalid UTF-8, huge numbers,
 * numbers from nowhere, permits used after they were settled, frees of
 * NULL. Each is an error that names the argument, never a crash; out
 * parameters are left untouched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define UNTOUCHED ((void *)0x5a5a)

static const char *CONFIG =
    "[scopes.\"openai/org\"]\n"
    "limits = [{ dimension = \"tokens\", amount = 1000, window = \"1m\" }]\n";

/* Checks that the last failure is `expected`, naming argument `field`. */
#define CHECK_FAILED(call, expected, field_name)        \
    do {                                                \
        CHECK_RESULT(call, expected);                   \
        CHECK_STR(last_error().field, field_name);      \
    } while (0)

static void null_arguments(const llmgov_governor *gov, llmgov_permit *permit) {
    const llmgov_governor *out_gov = UNTOUCHED;
    CHECK_FAILED(llmgov_governor_from_toml(NULL, NULL, &out_gov), LLMGOV_RESULT_NULL_ARGUMENT, "toml");
    CHECK_FAILED(llmgov_governor_from_toml(CONFIG, NULL, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_governor");
    CHECK_FAILED(llmgov_governor_from_json(NULL, NULL, &out_gov), LLMGOV_RESULT_NULL_ARGUMENT, "json");
    CHECK_FAILED(llmgov_governor_from_preset(NULL, NULL, &out_gov), LLMGOV_RESULT_NULL_ARGUMENT, "name");
    CHECK_FAILED(llmgov_governor_from_preset("openai-gpt-4o-tier1", NULL, NULL), LLMGOV_RESULT_NULL_ARGUMENT,
                 "out_governor");
    CHECK(out_gov == UNTOUCHED);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "null_argument");
    CHECK_STR(e.message, "argument `out_governor` must not be NULL");
    CHECK(e.value == NULL && e.scope == NULL);

    const char *path = "openai/org";
    const char *null_path[] = {"openai/org", NULL};
    uint64_t route = 77;
    CHECK_FAILED(llmgov_governor_route(NULL, &path, 1, &route), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_route(gov, NULL, 1, &route), LLMGOV_RESULT_NULL_ARGUMENT, "paths");
    CHECK_FAILED(llmgov_governor_route(gov, null_path, 2, &route), LLMGOV_RESULT_NULL_ARGUMENT, "paths[1]");
    CHECK_FAILED(llmgov_governor_route(gov, &path, 1, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_route");
    CHECK(route == 77);
    uint64_t number = 77;
    CHECK_FAILED(llmgov_governor_scope(gov, NULL, &number), LLMGOV_RESULT_NULL_ARGUMENT, "path");
    CHECK_FAILED(llmgov_governor_scope(NULL, path, &number), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_scope(gov, path, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_scope");
    CHECK_FAILED(llmgov_governor_class(gov, NULL, &route), LLMGOV_RESULT_NULL_ARGUMENT, "name");
    CHECK_FAILED(llmgov_governor_class(NULL, "batch", &route), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_class(gov, "batch", NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_class");
    CHECK(number == 77 && route == 77);

    char *json = UNTOUCHED;
    CHECK_FAILED(llmgov_governor_snapshot_json(NULL, &json), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_snapshot_json(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_json");
    CHECK_FAILED(llmgov_governor_scope_snapshot_json(NULL, 0, &json), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_scope_snapshot_json(gov, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_json");
    CHECK(json == UNTOUCHED);
    uint64_t ns = 5;
    CHECK_FAILED(llmgov_governor_now(NULL, &ns), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_now(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_ns");

    llmgov_request request = {0};
    llmgov_permit *out_permit = UNTOUCHED;
    CHECK_FAILED(llmgov_governor_try_acquire(NULL, &request, &out_permit), LLMGOV_RESULT_NULL_ARGUMENT, "governor");
    CHECK_FAILED(llmgov_governor_try_acquire(gov, NULL, &out_permit), LLMGOV_RESULT_NULL_ARGUMENT, "request");
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_permit");
    CHECK(out_permit == UNTOUCHED);

    llmgov_usage usage = {0};
    llmgov_classification c;
    llmgov_permit_state state;
    CHECK_FAILED(llmgov_permit_settle(NULL, usage), LLMGOV_RESULT_NULL_ARGUMENT, "permit");
    CHECK_FAILED(llmgov_permit_cancel(NULL), LLMGOV_RESULT_NULL_ARGUMENT, "permit");
    CHECK_FAILED(llmgov_permit_add_output(NULL, 1), LLMGOV_RESULT_NULL_ARGUMENT, "permit");
    CHECK_FAILED(llmgov_permit_report(NULL, 200, NULL, 0, NULL, 0, &c), LLMGOV_RESULT_NULL_ARGUMENT, "permit");
    CHECK_FAILED(llmgov_permit_report(permit, 200, NULL, 0, NULL, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out");
    CHECK_FAILED(llmgov_permit_report(permit, 200, NULL, 3, NULL, 0, &c), LLMGOV_RESULT_NULL_ARGUMENT, "headers");
    CHECK_FAILED(llmgov_permit_report(permit, 200, NULL, 0, NULL, 9, &c), LLMGOV_RESULT_NULL_ARGUMENT, "body");
    llmgov_header nameless = {NULL, 4, NULL, 0};
    CHECK_FAILED(llmgov_permit_report(permit, 200, &nameless, 1, NULL, 0, &c), LLMGOV_RESULT_NULL_ARGUMENT,
                 "headers[0].name");
    CHECK_FAILED(llmgov_permit_get_state(NULL, &state), LLMGOV_RESULT_NULL_ARGUMENT, "permit");
    CHECK_FAILED(llmgov_permit_get_state(permit, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_state");
    CHECK_FAILED(llmgov_permit_get_charged(NULL, &usage), LLMGOV_RESULT_NULL_ARGUMENT, "permit");
    CHECK_FAILED(llmgov_permit_get_charged(permit, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_usage");

    CHECK_FAILED(llmgov_manual_clock_advance(NULL, 1), LLMGOV_RESULT_NULL_ARGUMENT, "clock");
    CHECK_FAILED(llmgov_manual_clock_set(NULL, 1), LLMGOV_RESULT_NULL_ARGUMENT, "clock");
    CHECK_FAILED(llmgov_manual_clock_now(NULL, &ns), LLMGOV_RESULT_NULL_ARGUMENT, "clock");
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    CHECK_FAILED(llmgov_manual_clock_now(clock, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_ns");
    llmgov_manual_clock_free(clock);

    uint64_t tokens = 9;
    CHECK_FAILED(llmgov_response_classify(200, NULL, 0, NULL, 0, 0, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out");
    CHECK_FAILED(llmgov_response_classify_json(200, NULL, 0, NULL, 0, 0, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT,
                 "out_json");
    CHECK_FAILED(llmgov_tokens_count(0, NULL, 5, &tokens), LLMGOV_RESULT_NULL_ARGUMENT, "text");
    CHECK_FAILED(llmgov_tokens_count(0, "abc", 3, NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out_tokens");
    CHECK_FAILED(llmgov_tokens_count_for_model(NULL, "abc", 3, &tokens), LLMGOV_RESULT_NULL_ARGUMENT, "model");
    CHECK_FAILED(llmgov_tokens_estimate(NULL, 1, &tokens), LLMGOV_RESULT_NULL_ARGUMENT, "text");
    CHECK(tokens == 9);
    /* NULL with length 0 is an empty text, not an error. */
    CHECK_OK(llmgov_tokens_estimate(NULL, 0, &tokens));
    CHECK(tokens == 0);
    CHECK_FAILED(llmgov_last_error(NULL), LLMGOV_RESULT_NULL_ARGUMENT, "out");
}

static void invalid_utf8(const llmgov_governor *gov) {
    const llmgov_governor *out_gov = UNTOUCHED;
    CHECK_FAILED(llmgov_governor_from_toml("name = \"\xff\"", NULL, &out_gov), LLMGOV_RESULT_INVALID_UTF8, "toml");
    CHECK_STR(last_error().code, "invalid_utf8");
    CHECK_FAILED(llmgov_governor_from_preset("openai-\xc3", NULL, &out_gov), LLMGOV_RESULT_INVALID_UTF8, "name");
    CHECK(out_gov == UNTOUCHED);
    llmgov_error e = last_error();
    CHECK_STR(e.value, "openai-\xef\xbf\xbd"); /* the bad byte shown as U+FFFD */
    CHECK_CONTAINS(e.message, "argument `name` = `openai-");
    CHECK_CONTAINS(e.message, "not valid UTF-8");

    const char *paths[] = {"openai/org", "tenants/\xe2\x82"};
    uint64_t route = 77;
    CHECK_FAILED(llmgov_governor_route(gov, paths, 2, &route), LLMGOV_RESULT_INVALID_UTF8, "paths[1]");
    CHECK(route == 77);
    uint64_t tokens = 9;
    CHECK_FAILED(llmgov_tokens_count(0, "ok \x80 no", 8, &tokens), LLMGOV_RESULT_INVALID_UTF8, "text");
    CHECK_FAILED(llmgov_tokens_estimate("\xc0\xaf", 2, &tokens), LLMGOV_RESULT_INVALID_UTF8, "text");
    CHECK_FAILED(llmgov_tokens_count_for_model("gpt\xff", "a", 1, &tokens), LLMGOV_RESULT_INVALID_UTF8, "model");
    CHECK(tokens == 9);
    /* Header bytes need not be UTF-8: they are read as the provider sent them. */
    static const uint8_t name[] = {'x', '-', 0xff}, value[] = {0xfe, '1'};
    llmgov_header header = {name, 3, value, 2};
    llmgov_classification c;
    CHECK_OK(llmgov_response_classify(200, &header, 1, value, 2, LLMGOV_PROVIDER_AUTO, 0, &c));
    CHECK(!c.limited);
}

static void bad_paths_and_numbers(const llmgov_governor *gov) {
    uint64_t route = 77;
    const char *unknown = "nobody/here", *empty_segment = "openai//org";
    CHECK_RESULT(llmgov_governor_route(gov, &unknown, 1, &route), LLMGOV_RESULT_UNKNOWN_SCOPE);
    CHECK_STR(last_error().scope, "nobody/here");
    CHECK_RESULT(llmgov_governor_route(gov, &empty_segment, 1, &route), LLMGOV_RESULT_INVALID_PATH);
    CHECK_STR(last_error().scope, "openai//org");
    CHECK_RESULT(llmgov_governor_route(gov, &unknown, 0, &route), LLMGOV_RESULT_INVALID_REQUEST);
    CHECK_STR(last_error().field, "paths");
    CHECK(route == 77);

    llmgov_request request = {0};
    llmgov_permit *permit = UNTOUCHED;
    request.route = 12345; /* never handed out */
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    CHECK_STR(last_error().value, "12345");
    request.route = UINT32_MAX;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    const char *path = "openai/org";
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &request.route));
    request.class_id = UINT32_MAX;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_INVALID_REQUEST, "class_id");
    request.class_id = 0;
    request.input_tokens = UINT64_MAX;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_INVALID_REQUEST, "input_tokens");
    CHECK_STR(last_error().value, "18446744073709551615");
    request.input_tokens = 10;
    request.cached_input_tokens = 11;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_INVALID_REQUEST,
                 "cached_input_tokens");
    request.cached_input_tokens = 0;
    request.max_output_tokens = (1ull << 40) + 1;
    /* The core names the estimate's field. */
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &request, &permit), LLMGOV_RESULT_INVALID_REQUEST, "output_tokens");
    CHECK(permit == UNTOUCHED);

    /* Lengths larger than any array can be are refused before being read. */
    llmgov_classification c;
    llmgov_header header = {(const uint8_t *)"a", 1, (const uint8_t *)"b", 1};
    CHECK_FAILED(llmgov_response_classify(429, &header, SIZE_MAX, NULL, 0, 0, 0, &c), LLMGOV_RESULT_INVALID_ARGUMENT,
                 "headers_len");
    CHECK_FAILED(llmgov_response_classify(429, NULL, 0, (const uint8_t *)"x", SIZE_MAX, 0, 0, &c),
                 LLMGOV_RESULT_INVALID_ARGUMENT, "body_len");
    uint64_t tokens = 9;
    CHECK_FAILED(llmgov_tokens_estimate("x", SIZE_MAX, &tokens), LLMGOV_RESULT_INVALID_ARGUMENT, "text_len");
    CHECK_FAILED(llmgov_tokens_count(7, "x", 1, &tokens), LLMGOV_RESULT_INVALID_ARGUMENT, "encoding");
    CHECK_STR(last_error().value, "7");
    CHECK_FAILED(llmgov_response_classify(429, NULL, 0, NULL, 0, 99, 0, &c), LLMGOV_RESULT_INVALID_ARGUMENT,
                 "provider");
    CHECK(tokens == 9);

    /* A config value with a NUL in it is quoted back with the NUL escaped. */
    const llmgov_governor *out_gov = UNTOUCHED;
    CHECK_RESULT(llmgov_governor_from_json("{\"scopes\":{\"a\":{\"limits\":[{\"dimension\":\"to\\u0000kens\","
                                           "\"amount\":1,\"window\":\"1m\"}]}}}",
                                           NULL, &out_gov),
                 LLMGOV_RESULT_INVALID_CONFIG);
    CHECK_CONTAINS(last_error().message, "to\\0kens");
    CHECK(out_gov == UNTOUCHED);
}

/* A manual clock ends at 2^63 ns (as the Python binding's): it starts there
 * at the latest, a step past it is refused naming `ns` and moves nothing,
 * and a governor on a clock at its end still admits. */
static void a_manual_clock_ends_at_2_to_63_ns(void) {
    const uint64_t end = UINT64_C(1) << 63;
    llmgov_manual_clock *clock = llmgov_manual_clock_new(UINT64_MAX);
    uint64_t now = 0;
    CHECK_OK(llmgov_manual_clock_now(clock, &now));
    CHECK(now == end);
    llmgov_manual_clock_free(clock);
    clock = llmgov_manual_clock_new(end - 5);
    CHECK_FAILED(llmgov_manual_clock_advance(clock, UINT64_MAX), LLMGOV_RESULT_INVALID_ARGUMENT, "ns");
    CHECK_STR(last_error().value, "18446744073709551615");
    CHECK_FAILED(llmgov_manual_clock_advance(clock, 6), LLMGOV_RESULT_INVALID_ARGUMENT, "ns");
    llmgov_error e = last_error();
    CHECK_STR(e.code, "invalid_argument");
    CHECK_STR(e.message, "argument `ns` = `6`: would move the clock (now 9223372036854 ms) past 2^63 ns, "
                         "about 292 years");
    CHECK_FAILED(llmgov_manual_clock_set(clock, end + 1), LLMGOV_RESULT_INVALID_ARGUMENT, "ns");
    CHECK_FAILED(llmgov_manual_clock_set(clock, UINT64_MAX), LLMGOV_RESULT_INVALID_ARGUMENT, "ns");
    CHECK_OK(llmgov_manual_clock_now(clock, &now));
    CHECK(now == end - 5);
    CHECK_OK(llmgov_manual_clock_advance(clock, 5)); /* to the end exactly */
    CHECK_OK(llmgov_manual_clock_now(clock, &now));
    CHECK(now == end);
    CHECK_OK(llmgov_manual_clock_set(clock, 3)); /* never backwards */
    CHECK_OK(llmgov_manual_clock_set(clock, end));
    CHECK_OK(llmgov_manual_clock_advance(clock, 0));
    CHECK_OK(llmgov_manual_clock_now(clock, &now));
    CHECK(now == end);
    const llmgov_governor *late = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, clock, &late));
    const char *path = "openai/org";
    llmgov_request request = {0};
    request.input_tokens = 10;
    CHECK_OK(llmgov_governor_route(late, &path, 1, &request.route));
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(late, &request, &permit));
    llmgov_usage usage = {0};
    usage.input_tokens = 10;
    CHECK_OK(llmgov_permit_settle(permit, usage));
    llmgov_permit_free(permit);
    llmgov_governor_free(late);
    llmgov_manual_clock_free(clock);
}

/* Two governors of one config intern their first route at the same index:
 * the route number tells them apart, so a request on the other's route is
 * refused and charges nothing on either. */
static void a_route_of_another_governor_is_refused(const llmgov_governor *gov, llmgov_manual_clock *clock) {
    const llmgov_governor *other = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, clock, &other));
    const char *path = "openai/org";
    llmgov_request mine = {0}, theirs = {0};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &mine.route));
    CHECK_OK(llmgov_governor_route(other, &path, 1, &theirs.route));
    CHECK(mine.route != theirs.route && mine.route != 0 && theirs.route != 0);
    theirs.input_tokens = mine.input_tokens = 100;

    llmgov_permit *permit = UNTOUCHED;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &theirs, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    llmgov_error e = last_error();
    CHECK_CONTAINS(e.message, "`route`");
    CHECK_CONTAINS(e.message, "belongs to another governor");
    char number[32];
    snprintf(number, sizeof number, "%llu", (unsigned long long)theirs.route);
    CHECK_STR(e.value, number);
    CHECK_FAILED(llmgov_governor_acquire(gov, &theirs, 0, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    CHECK_CONTAINS(last_error().message, "belongs to another governor");
    llmgov_cancel_token *token = llmgov_cancel_token_new();
    CHECK_FAILED(llmgov_governor_acquire_cancellable(gov, &theirs, 0, token, &permit), LLMGOV_RESULT_INVALID_REQUEST,
                 "route");
    llmgov_cancel_token_free(token);
    CHECK_FAILED(llmgov_governor_try_acquire(other, &mine, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    CHECK_CONTAINS(last_error().message, "belongs to another governor");
    /* Classes likewise: each governor's first named class is at index 1. */
    uint64_t my_batch = 0, their_batch = 0;
    CHECK_OK(llmgov_governor_class(gov, "batch", &my_batch));
    CHECK_OK(llmgov_governor_class(other, "batch", &their_batch));
    CHECK(my_batch != their_batch && my_batch != 0);
    mine.class_id = their_batch;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &mine, &permit), LLMGOV_RESULT_INVALID_REQUEST, "class_id");
    CHECK_CONTAINS(last_error().message, "this class belongs to another governor");
    mine.class_id = my_batch;
    CHECK(permit == UNTOUCHED);
    /* Scopes likewise: each governor's `a/b` is its first scope. */
    uint64_t my_scope = 0, their_scope = 0;
    CHECK_OK(llmgov_governor_scope(gov, path, &my_scope));
    CHECK_OK(llmgov_governor_scope(other, path, &their_scope));
    CHECK(my_scope != their_scope);
    char *scope_json = NULL;
    CHECK_FAILED(llmgov_governor_scope_snapshot_json(gov, their_scope, &scope_json), LLMGOV_RESULT_INVALID_REQUEST,
                 "scope");
    CHECK_CONTAINS(last_error().message, "this scope belongs to another governor");
    CHECK(scope_json == NULL);
    char *json = NULL;
    CHECK_OK(llmgov_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"reserved\":0,");
    llmgov_string_free(json);
    CHECK_OK(llmgov_governor_snapshot_json(other, &json));
    CHECK_CONTAINS(json, "\"reserved\":0,");
    llmgov_string_free(json);

    /* Each on its own route: admitted. A zeroed route, or one no governor
     * made, is no route (not "another governor's"). */
    CHECK_OK(llmgov_governor_try_acquire(other, &theirs, &permit));
    CHECK_OK(llmgov_permit_cancel(permit));
    llmgov_permit_free(permit);
    permit = UNTOUCHED;
    theirs.route = 0;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &theirs, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    CHECK_CONTAINS(last_error().message, "not a number this governor's llmgov_governor_route returned");
    theirs.route = UINT64_MAX;
    CHECK_FAILED(llmgov_governor_try_acquire(gov, &theirs, &permit), LLMGOV_RESULT_INVALID_REQUEST, "route");
    CHECK_CONTAINS(last_error().message, "not a number this governor's llmgov_governor_route returned");
    CHECK(permit == UNTOUCHED);
    llmgov_governor_free(other);
}

/* What is no HTTP status (outside 100 to 999, as Python and Node check)
 * is refused naming `status`, and nothing is fed back. */
static void statuses_outside_100_to_999_are_refused(const llmgov_governor *gov) {
    const char *path = "openai/org";
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &request.route));
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit));
    llmgov_header retry = {(const uint8_t *)"retry-after", 11, (const uint8_t *)"30", 2};
    const uint16_t bad[] = {0, 99, 1000, 65535};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char value[8];
        snprintf(value, sizeof value, "%u", (unsigned)bad[i]);
        llmgov_classification c;
        CHECK_FAILED(llmgov_response_classify(bad[i], &retry, 1, NULL, 0, LLMGOV_PROVIDER_AUTO, 0, &c),
                     LLMGOV_RESULT_INVALID_REQUEST, "status");
        llmgov_error e = last_error();
        CHECK_STR(e.value, value);
        CHECK_CONTAINS(e.message, "`status`");
        CHECK_CONTAINS(e.message, "must be an HTTP status from 100 to 999");
        char *json = UNTOUCHED;
        CHECK_FAILED(llmgov_response_classify_json(bad[i], &retry, 1, NULL, 0, LLMGOV_PROVIDER_AUTO, 0, &json),
                     LLMGOV_RESULT_INVALID_REQUEST, "status");
        CHECK(json == UNTOUCHED);
        CHECK_FAILED(llmgov_permit_report(permit, bad[i], &retry, 1, NULL, 0, &c), LLMGOV_RESULT_INVALID_REQUEST,
                     "status");
        CHECK_STR(last_error().value, value);
    }
    char *json = NULL;
    CHECK_OK(llmgov_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"admitted_then_provider_rejected\":0");
    llmgov_string_free(json);
    llmgov_classification c;
    CHECK_OK(llmgov_response_classify(100, NULL, 0, NULL, 0, LLMGOV_PROVIDER_AUTO, 0, &c));
    CHECK_OK(llmgov_response_classify(999, NULL, 0, NULL, 0, LLMGOV_PROVIDER_AUTO, 0, &c));
    CHECK_OK(llmgov_permit_report(permit, 200, NULL, 0, NULL, 0, &c));
    CHECK_OK(llmgov_permit_cancel(permit));
    llmgov_permit_free(permit);
}

static void permit_used_after_it_was_settled(const llmgov_governor *gov) {
    const char *path = "openai/org";
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &request.route));
    request.input_tokens = 100;
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit));
    CHECK_OK(llmgov_permit_settle(permit, (llmgov_usage){40, 0, 0}));
    CHECK_RESULT(llmgov_permit_settle(permit, (llmgov_usage){40, 0, 0}), LLMGOV_RESULT_PERMIT_FINISHED);
    llmgov_error e = last_error();
    CHECK_STR(e.code, "permit_finished");
    CHECK_STR(e.message, "permit already settled");
    CHECK_RESULT(llmgov_permit_cancel(permit), LLMGOV_RESULT_PERMIT_FINISHED);
    CHECK_RESULT(llmgov_permit_add_output(permit, 5), LLMGOV_RESULT_PERMIT_FINISHED);
    /* No double refund: 40 charged, 960 left. */
    char *json = NULL;
    CHECK_OK(llmgov_governor_snapshot_json(gov, &json));
    CHECK_CONTAINS(json, "\"available\":960");
    llmgov_string_free(json);
    /* A usage whose cached part exceeds the whole is refused, the permit untouched. */
    llmgov_permit *second = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &second));
    CHECK_FAILED(llmgov_permit_settle(second, (llmgov_usage){10, 20, 0}), LLMGOV_RESULT_INVALID_REQUEST,
                 "cached_input_tokens");
    CHECK_OK(llmgov_permit_cancel(second));
    CHECK_RESULT(llmgov_permit_settle(second, (llmgov_usage){0, 0, 0}), LLMGOV_RESULT_PERMIT_FINISHED);
    CHECK_STR(last_error().message, "permit already cancelled");
    llmgov_permit_free(permit);
    llmgov_permit_free(second);
}

static void frees_of_null_and_codes_of_anything(void) {
    llmgov_governor_free(NULL);
    llmgov_permit_free(NULL);
    llmgov_manual_clock_free(NULL);
    llmgov_string_free(NULL);
    CHECK_STR(llmgov_result_code(LLMGOV_RESULT_RATE_LIMITED), "rate_limited");
    CHECK_STR(llmgov_result_code(LLMGOV_RESULT_PERMIT_EXPIRED), "permit_expired");
    CHECK_STR(llmgov_result_code(LLMGOV_RESULT_INVALID_UTF8), "invalid_utf8");
    CHECK_STR(llmgov_result_code(4242), "unknown_result");
    CHECK_STR(llmgov_result_message(UINT32_MAX), "not an llmgov_result code");
    for (uint32_t r = 0; r < 256; r++) {
        CHECK(llmgov_result_message(r) != NULL && llmgov_result_code(r) != NULL);
    }
}

int main(void) {
    /* A manual clock, so that nothing refills while the checks run. */
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, clock, &gov));
    const char *path = "openai/org";
    llmgov_request request = {0};
    CHECK_OK(llmgov_governor_route(gov, &path, 1, &request.route));
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(gov, &request, &permit));

    null_arguments(gov, permit);
    invalid_utf8(gov);
    bad_paths_and_numbers(gov);
    a_manual_clock_ends_at_2_to_63_ns();
    CHECK_OK(llmgov_permit_cancel(permit));
    llmgov_permit_free(permit);
    a_route_of_another_governor_is_refused(gov, clock);
    statuses_outside_100_to_999_are_refused(gov);
    permit_used_after_it_was_settled(gov);
    frees_of_null_and_codes_of_anything();
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
    return finish("c-misuse");
}
