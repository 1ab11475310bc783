/* Provider feedback and token counting through the C ABI. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define HEADER(n, v) {(const uint8_t *)(n), sizeof(n) - 1, (const uint8_t *)(v), sizeof(v) - 1}

static void classify_fills_the_struct(void) {
    /* Anthropic: separate input and output token limits, RFC 3339 resets. */
    llmgov_header headers[] = {
        HEADER("anthropic-ratelimit-input-tokens-limit", "40000"),
        HEADER("anthropic-ratelimit-input-tokens-remaining", "0"),
        HEADER("anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:30Z"),
        HEADER("anthropic-ratelimit-output-tokens-remaining", "7000"),
        HEADER("retry-after", "30"),
    };
    static const char body[] =
        "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"input tokens per minute\"}}";
    const uint64_t now_ms = 1767225600000ull; /* 2026-01-01T00:00:00Z */
    llmgov_classification c;
    CHECK_OK(llmgov_response_classify(429, headers, 5, (const uint8_t *)body, sizeof body - 1, LLMGOV_PROVIDER_AUTO,
                                      now_ms, &c));
    CHECK(c.limited && c.retryable);
    CHECK(c.kind == LLMGOV_LIMIT_KIND_RATE_LIMITED);
    CHECK(c.provider == LLMGOV_PROVIDER_ANTHROPIC);
    CHECK(c.dimension == LLMGOV_LIMIT_DIMENSION_INPUT_TOKENS);
    CHECK(c.has_retry_after && c.retry_after_ms == 30000);
    CHECK(c.has_limit[LLMGOV_LIMIT_DIMENSION_INPUT_TOKENS] && c.limit[LLMGOV_LIMIT_DIMENSION_INPUT_TOKENS] == 40000);
    CHECK(c.has_remaining[LLMGOV_LIMIT_DIMENSION_OUTPUT_TOKENS]);
    CHECK(c.remaining[LLMGOV_LIMIT_DIMENSION_OUTPUT_TOKENS] == 7000);
    CHECK(c.has_reset[LLMGOV_LIMIT_DIMENSION_INPUT_TOKENS] && c.reset_ms[LLMGOV_LIMIT_DIMENSION_INPUT_TOKENS] == 30000);
    CHECK(!c.has_limit[LLMGOV_LIMIT_DIMENSION_REQUESTS]);

    /* A quota refusal is never retryable, whatever the headers say. */
    static const char quota[] =
        "{\"error\":{\"message\":\"You exceeded your current quota\",\"type\":\"insufficient_quota\","
        "\"code\":\"insufficient_quota\"}}";
    CHECK_OK(llmgov_response_classify(429, NULL, 0, (const uint8_t *)quota, sizeof quota - 1, LLMGOV_PROVIDER_OPENAI,
                                      now_ms, &c));
    CHECK(c.limited && !c.retryable);
    CHECK(c.kind == LLMGOV_LIMIT_KIND_QUOTA_EXHAUSTED);

    /* A success is classified too; garbage bodies are no error. */
    static const uint8_t garbage[] = {0xff, 0x00, '{', '{'};
    CHECK_OK(llmgov_response_classify(200, NULL, 0, garbage, sizeof garbage, LLMGOV_PROVIDER_AUTO, now_ms, &c));
    CHECK(!c.limited && c.kind == LLMGOV_LIMIT_KIND_NONE && !c.has_retry_after);
}

static void classify_as_json(void) {
    llmgov_header headers[] = {
        HEADER("x-ratelimit-remaining-requests", "0"),
        HEADER("x-ratelimit-reset-requests", "1m51.535s"),
        HEADER("retry-after-ms", "1500"),
    };
    char *json = NULL;
    CHECK_OK(llmgov_response_classify_json(429, headers, 3, NULL, 0, LLMGOV_PROVIDER_OPENAI, 0, &json));
    CHECK_CONTAINS(json, "\"limited\":true");
    CHECK_CONTAINS(json, "\"kind\":\"rate_limited\"");
    CHECK_CONTAINS(json, "\"retry_after_ms\":1500");
    CHECK_CONTAINS(json, "\"remaining\":{\"requests\":0}");
    CHECK_CONTAINS(json, "\"reset_ms\":{\"requests\":111535}");
    CHECK_CONTAINS(json, "\"provider\":\"openai\"");
    llmgov_string_free(json);
}

static void token_counts(void) {
    static const char text[] = "tiktoken is great!";
    uint64_t n = 0;
    CHECK_OK(llmgov_tokens_count(LLMGOV_ENCODING_O200K, text, sizeof text - 1, &n));
    CHECK(n == 6);
    CHECK_OK(llmgov_tokens_count_for_model("openai/gpt-4o-2024-08-06", text, sizeof text - 1, &n));
    CHECK(n == 6);
    CHECK_OK(llmgov_tokens_count(LLMGOV_ENCODING_CL100K, "hello world", 11, &n));
    CHECK(n == 2);
    CHECK_OK(llmgov_tokens_count(LLMGOV_ENCODING_O200K, NULL, 0, &n));
    CHECK(n == 0);
    /* A long run of one character: counted, not a quadratic stall. */
    size_t len = 20000;
    char *long_text = malloc(len);
    CHECK(long_text != NULL);
    memset(long_text, 'a', len);
    CHECK_OK(llmgov_tokens_count(LLMGOV_ENCODING_O200K, long_text, len, &n));
    CHECK(n > 1000 && n < len);
    uint64_t estimate = 0;
    CHECK_OK(llmgov_tokens_estimate(long_text, len, &estimate));
    CHECK(estimate > 0);
    free(long_text);
    /* Text with an interior NUL is counted whole: lengths, not terminators. */
    CHECK_OK(llmgov_tokens_estimate("a\0b", 3, &n));
    CHECK(n >= 2);
}

int main(void) {
    classify_fills_the_struct();
    classify_as_json();
    token_counts();
    return finish("c-feedback");
}
