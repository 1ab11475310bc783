/* Routing through a model profile, with an event hook and the Prometheus
 * text: two deployments of gpt-4o, the second taking over when the first
 * is full, the refusals logged by the hook (one per request refused,
 * however many deployments it tried), and the metrics printed.
 *
 * Built and run by `make test-c` (target c-examples). */
#include <stdio.h>
#include <string.h>

#include "llmgov.h"

static const char *CONFIG =
    "[scopes.\"openai/key-1\"]\n"
    "provider = true\n"
    "limits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n"
    "[scopes.\"azure/eastus\"]\n"
    "provider = true\n"
    "limits = [{ dimension = \"requests\", amount = 1, window = \"1m\" }]\n"
    "[profiles.gpt-4o]\n"
    "deployments = [\"openai/key-1\", \"azure/eastus\"]\n";

/* Called on the thread that caused the event; here, a count and a log. */
static void on_event(void *userdata, const char *event_json, size_t len) {
    int *events = userdata;
    (*events)++;
    printf("event: %.*s\n", (int)len, event_json);
}

int main(void) {
    const llmgov_governor *gov = NULL;
    llmgov_profile *profile = NULL;
    int events = 0;
    if (llmgov_governor_from_toml(CONFIG, NULL, &gov) != LLMGOV_RESULT_OK ||
        llmgov_profile_new(gov, "gpt-4o", NULL, 0, &profile) != LLMGOV_RESULT_OK ||
        llmgov_governor_set_event_hook(gov, on_event, &events) != LLMGOV_RESULT_OK) {
        llmgov_error e;
        llmgov_last_error(&e);
        fprintf(stderr, "setup failed: %s\n", e.message);
        return 1;
    }
    llmgov_request request = {0}; /* one request; route is chosen per deployment */
    for (int i = 0; i < 3; i++) {
        llmgov_permit *permit = NULL;
        llmgov_routed routed;
        if (llmgov_governor_try_acquire_profile(gov, profile, &request, &permit, &routed) == LLMGOV_RESULT_OK) {
            printf("request %d: %s on %s\n", i, routed.profile, routed.deployment);
            llmgov_permit_settle(permit, (llmgov_usage){0, 0, 0});
            llmgov_permit_free(permit);
        } else {
            llmgov_error e;
            llmgov_last_error(&e);
            printf("request %d: refused by %s; retry after %llu ms\n", i, e.scope,
                   (unsigned long long)e.retry_after_ms);
        }
    }
    char *metrics = NULL;
    if (llmgov_governor_prometheus(gov, &metrics) == LLMGOV_RESULT_OK) {
        /* Just the admission counters here; serve the whole text at /metrics. */
        for (char *line = strtok(metrics, "\n"); line != NULL; line = strtok(NULL, "\n"))
            if (strncmp(line, "llmgov_admitted_total", 21) == 0 || strncmp(line, "llmgov_rate_limited_total", 25) == 0)
                printf("%s\n", line);
        llmgov_string_free(metrics);
    }
    llmgov_governor_set_event_hook(gov, NULL, NULL); /* after this, `events` may go */
    printf("%d event(s)\n", events);
    llmgov_profile_free(profile);
    llmgov_governor_free(gov);
    return events > 0 ? 0 : 1;
}
