/* Routing through a model profile from C, on a manual clock: the roomiest
 * deployment is chosen (keys of one organisation share its pool), a refused
 * deployment fails over, an open breaker is skipped, the fallback chain is
 * followed only where the class allows, and bad input is an error naming
 * the field and the value. */
#include <stdint.h>

#include "check.h"

#define LIMITS(rpm, tpm)                                                          \
    "[{\"dimension\":\"requests\",\"amount\":" #rpm ",\"window\":\"1m\"},"        \
    "{\"dimension\":\"tokens\",\"amount\":" #tpm ",\"window\":\"1m\"}]"

/* Two keys of one OpenAI organisation, an Azure region, and a cheaper
 * fallback profile the eval class may not use. */
static const char *CONFIG =
    "{\"adaptive\":{\"breaker\":{\"failures\":1,\"pauses\":[\"30s\"]}},"
    "\"scopes\":{"
    "\"openai/org\":{\"provider\":true,\"limits\":" LIMITS(100, 10000) "},"
    "\"openai/org/key-1\":{\"provider\":true,\"limits\":" LIMITS(100, 10000) "},"
    "\"openai/org/key-2\":{\"provider\":true,\"limits\":" LIMITS(100, 10000) "},"
    "\"azure/eastus\":{\"provider\":true,\"limits\":" LIMITS(100, 8000) "},"
    "\"mini/org\":{\"provider\":true,\"limits\":" LIMITS(100, 100000) "},"
    "\"tenants/*\":{\"limits\":[{\"dimension\":\"tokens\",\"amount\":1000000,\"window\":\"1m\"}]}},"
    "\"profiles\":{"
    "\"gpt-4o\":{\"deployments\":[\"openai/org/key-1\",\"openai/org/key-2\",\"azure/eastus\"],"
    "\"fallback\":\"mini\",\"fallback_allowed\":{\"eval\":false}},"
    "\"mini\":{\"deployments\":[\"mini/org\"]}}}";

static const char *TENANT = "tenants/acme";

typedef struct {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov;
    llmgov_profile *profile;
} fixture;

static fixture setup(void) {
    fixture f = {llmgov_manual_clock_new(0), NULL, NULL};
    CHECK_OK(llmgov_governor_from_json(CONFIG, f.clock, &f.gov));
    CHECK_OK(llmgov_profile_new(f.gov, "gpt-4o", &TENANT, 1, &f.profile));
    return f;
}

static void teardown(fixture *f) {
    llmgov_profile_free(f->profile);
    llmgov_governor_free(f->gov);
    llmgov_manual_clock_free(f->clock);
}

/* Acquires `tokens` through the profile; the permit is kept in `*held`
 * (up to 8) and freed by `release`. */
typedef struct {
    llmgov_permit *permits[8];
    int n;
} held;

static llmgov_result ask(fixture *f, held *h, uint64_t tokens, uint64_t class_id, llmgov_routed *routed) {
    llmgov_request request = {0};
    request.input_tokens = tokens;
    request.class_id = class_id;
    request.route = 12345; /* not read: each deployment's route is used */
    llmgov_permit *permit = NULL;
    llmgov_result r = llmgov_governor_try_acquire_profile(f->gov, f->profile, &request, &permit, routed);
    if (r == LLMGOV_RESULT_OK) h->permits[h->n++] = permit;
    return r;
}

static void release(held *h) {
    for (int i = 0; i < h->n; i++) llmgov_permit_free(h->permits[i]);
    h->n = 0;
}

static void the_roomiest_deployment_is_chosen(void) {
    fixture f = setup();
    held h = {0};
    llmgov_routed routed;
    CHECK_OK(ask(&f, &h, 6000, 0, &routed));
    CHECK_STR(routed.profile, "gpt-4o");
    CHECK_STR(routed.deployment, "openai/org/key-1"); /* all idle: the first */
    CHECK(!routed.fell_back);
    /* The org pool is 40% free, so key-2 (same org) is too; Azure is not
     * touched. */
    CHECK_OK(ask(&f, &h, 1000, 0, &routed));
    CHECK_STR(routed.deployment, "azure/eastus");
    const char *first_azure = routed.deployment;
    CHECK_OK(ask(&f, &h, 1000, 0, &routed));
    CHECK_STR(routed.deployment, "azure/eastus");
    CHECK(routed.deployment == first_azure); /* one string per name, owned by the profile */
    /* The permit is an ordinary one, charged on the chosen route. */
    CHECK_OK(llmgov_permit_settle(h.permits[0], (llmgov_usage){5000, 0, 10}));
    release(&h);
    teardown(&f);
}

static void a_refused_deployment_fails_over_and_an_open_breaker_is_skipped(void) {
    fixture f = setup();
    held h = {0};
    llmgov_routed routed;
    CHECK_OK(ask(&f, &h, 7000, 0, &routed));
    CHECK_STR(routed.deployment, "openai/org/key-1");
    CHECK_OK(ask(&f, &h, 7000, 0, &routed));
    CHECK_STR(routed.deployment, "azure/eastus"); /* the org pool cannot take 7000 more */
    release(&h);
    teardown(&f);

    fixture g = setup();
    CHECK_OK(ask(&g, &h, 1, 0, &routed));
    CHECK_STR(routed.deployment, "openai/org/key-1");
    llmgov_classification c;
    CHECK_OK(llmgov_permit_report(h.permits[0], 503, NULL, 0, NULL, 0, &c));
    CHECK_OK(ask(&g, &h, 1, 0, &routed));
    CHECK_STR(routed.deployment, "azure/eastus"); /* key-1's breaker (and its org's) is open */
    CHECK(!routed.fell_back);
    release(&h);
    teardown(&g);
}

static void fallback_follows_the_chain_only_where_the_class_allows(void) {
    fixture f = setup();
    held h = {0};
    llmgov_routed routed;
    uint64_t eval = 0, batch = 0;
    CHECK_OK(llmgov_governor_class(f.gov, "eval", &eval));
    CHECK_OK(llmgov_governor_class(f.gov, "batch", &batch));
    CHECK_OK(ask(&f, &h, 9000, 0, &routed));
    CHECK_STR(routed.deployment, "openai/org/key-1");

    /* eval may not fall back: refused, with the reason, nothing written. */
    routed.profile = (const char *)0x1;
    CHECK_RESULT(ask(&f, &h, 9000, eval, &routed), LLMGOV_RESULT_RATE_LIMITED);
    llmgov_error e = last_error();
    CHECK_STR(e.scope, "openai/org");
    CHECK(e.dimension == LLMGOV_DIMENSION_TOKENS);
    CHECK(e.has_retry_after && e.retry_after_ms > 0);
    CHECK(routed.profile == (const char *)0x1);

    CHECK_OK(ask(&f, &h, 9000, batch, &routed));
    CHECK(routed.fell_back);
    CHECK_STR(routed.profile, "mini");
    CHECK_STR(routed.deployment, "mini/org");
    release(&h);
    teardown(&f);
}

static void bad_input_names_the_field_and_the_value(void) {
    fixture f = setup();
    llmgov_profile *p = (llmgov_profile *)0x1;
    CHECK_RESULT(llmgov_profile_new(f.gov, "nope", NULL, 0, &p), LLMGOV_RESULT_INVALID_REQUEST);
    llmgov_error e = last_error();
    CHECK_STR(e.field, "profile");
    CHECK_STR(e.value, "nope");
    CHECK_CONTAINS(e.message, "nope");
    CHECK_CONTAINS(e.message, "gpt-4o"); /* the known ones */
    CHECK(p == (llmgov_profile *)0x1);

    CHECK_RESULT(llmgov_profile_new(f.gov, NULL, NULL, 0, &p), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "name");
    CHECK_RESULT(llmgov_profile_new(NULL, "gpt-4o", NULL, 0, &p), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK_RESULT(llmgov_profile_new(f.gov, "gpt-4o", NULL, 0, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_profile");
    CHECK_RESULT(llmgov_profile_new(f.gov, "gpt-4o", NULL, 1, &p), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "consumer_paths");
    const char *paths[] = {"tenants/acme", NULL};
    CHECK_RESULT(llmgov_profile_new(f.gov, "gpt-4o", paths, 2, &p), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "consumer_paths[1]");
    const char *unknown = "nowhere/x";
    CHECK_RESULT(llmgov_profile_new(f.gov, "gpt-4o", &unknown, 1, &p), LLMGOV_RESULT_UNKNOWN_SCOPE);
    CHECK_CONTAINS(last_error().message, "nowhere/x");
    CHECK(p == (llmgov_profile *)0x1);

    llmgov_request request = {0};
    llmgov_permit *permit = (llmgov_permit *)0x1;
    llmgov_routed routed;
    CHECK_RESULT(llmgov_governor_try_acquire_profile(f.gov, NULL, &request, &permit, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "profile");
    CHECK_RESULT(llmgov_governor_try_acquire_profile(f.gov, f.profile, NULL, &permit, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "request");
    CHECK_RESULT(llmgov_governor_try_acquire_profile(f.gov, f.profile, &request, &permit, NULL),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_routed");
    CHECK_RESULT(llmgov_governor_try_acquire_profile(NULL, f.profile, &request, &permit, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK_RESULT(llmgov_governor_try_acquire_profile(f.gov, f.profile, &request, NULL, &routed),
                 LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "out_permit");
    request.class_id = 77;
    CHECK_RESULT(llmgov_governor_try_acquire_profile(f.gov, f.profile, &request, &permit, &routed),
                 LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "class_id");
    CHECK_STR(e.value, "77");
    request.class_id = 0;

    /* A profile of another governor. */
    fixture other = setup();
    CHECK_RESULT(llmgov_governor_try_acquire_profile(f.gov, other.profile, &request, &permit, &routed),
                 LLMGOV_RESULT_INVALID_REQUEST);
    e = last_error();
    CHECK_STR(e.field, "profile");
    CHECK_STR(e.value, "a profile of another governor");
    CHECK(permit == (llmgov_permit *)0x1);
    teardown(&other);
    teardown(&f);
}

/* The profile keeps its governor alive: freed in either order, nothing
 * leaks or dangles (valgrind and ASan check). */
static void a_profile_outlives_its_governor(void) {
    fixture f = setup();
    llmgov_governor_free(f.gov);
    llmgov_profile_free(f.profile);
    llmgov_manual_clock_free(f.clock);
    llmgov_profile_free(NULL);
}

int main(void) {
    the_roomiest_deployment_is_chosen();
    a_refused_deployment_fails_over_and_an_open_breaker_is_skipped();
    fallback_follows_the_chain_only_where_the_class_allows();
    bad_input_names_the_field_and_the_value();
    a_profile_outlives_its_governor();
    return finish("routing");
}
