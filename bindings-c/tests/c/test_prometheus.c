/* The Prometheus text exposition from C: per scope and dimension limits
 * and use, the admission counters, the breaker state, and the queues; a
 * NULL argument is an error naming it. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

static const char *CONFIG =
    "[adaptive.breaker]\n"
    "failures = 1\n"
    "pauses = [\"30s\"]\n"
    "[scopes.\"openai/org\"]\n"
    "provider = true\n"
    "limits = [{ dimension = \"requests\", amount = 500, window = \"1m\" },\n"
    "          { dimension = \"tokens\", amount = 30000, window = \"1m\" }]\n"
    "[scopes.\"tenants/*\"]\n"
    "limits = [{ dimension = \"concurrency\", amount = 2 }]\n";

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

int main(void) {
    llmgov_manual_clock *clock = llmgov_manual_clock_new(0);
    const llmgov_governor *gov = NULL;
    CHECK_OK(llmgov_governor_from_toml(CONFIG, clock, &gov));
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

    char *text = NULL;
    CHECK_OK(llmgov_governor_prometheus(gov, &text));
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

    /* Settling shows at once. */
    CHECK_OK(llmgov_permit_settle(a, (llmgov_usage){1000, 0, 0}));
    CHECK_OK(llmgov_governor_prometheus(gov, &text));
    snprintf(series, sizeof series, "llmgov_in_use%s", tokens);
    CHECK(value_of(text, series) == 1100);
    llmgov_string_free(text);

    /* Bad input: nothing written, the argument named. */
    text = (char *)0x1;
    CHECK_RESULT(llmgov_governor_prometheus(NULL, &text), LLMGOV_RESULT_NULL_ARGUMENT);
    CHECK_STR(last_error().field, "governor");
    CHECK(text == (char *)0x1);
    CHECK_RESULT(llmgov_governor_prometheus(gov, NULL), LLMGOV_RESULT_NULL_ARGUMENT);
    llmgov_error e = last_error();
    CHECK_STR(e.field, "out_text");
    CHECK_CONTAINS(e.message, "out_text");

    llmgov_permit_free(a);
    llmgov_permit_free(b);
    llmgov_governor_free(gov);
    llmgov_manual_clock_free(clock);
    return finish("prometheus");
}
