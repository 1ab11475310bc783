/* The benchmark shapes, shared by the C, Go and Rust round-trip benches:
 * DEPTH nested scopes (s0, s0/s1, …) with the first DIMENSIONS of
 * requests, input_tokens, output_tokens, tokens, each so large that nothing
 * is ever refused (the benches measure reserving, not waiting). */
#ifndef LLMGOV_BENCH_SHAPES_H
#define LLMGOV_BENCH_SHAPES_H

#define LIMIT(d) "{\"dimension\":\"" d "\",\"amount\":1125899906842624,\"window\":\"1s\"}"
#define LIMITS_1 "[" LIMIT("requests") "]"
#define LIMITS_4 "[" LIMIT("requests") "," LIMIT("input_tokens") "," LIMIT("output_tokens") "," LIMIT("tokens") "]"

static const char *SHAPE_1X1 = "{\"scopes\":{\"s0\":{\"limits\":" LIMITS_1 "}}}";
static const char *SHAPE_6X4 =
    "{\"scopes\":{"
    "\"s0\":{\"limits\":" LIMITS_4 "},"
    "\"s0/s1\":{\"limits\":" LIMITS_4 "},"
    "\"s0/s1/s2\":{\"limits\":" LIMITS_4 "},"
    "\"s0/s1/s2/s3\":{\"limits\":" LIMITS_4 "},"
    "\"s0/s1/s2/s3/s4\":{\"limits\":" LIMITS_4 "},"
    "\"s0/s1/s2/s3/s4/s5\":{\"limits\":" LIMITS_4 "}}}";
static const char *PATH_1X1 = "s0";
static const char *PATH_6X4 = "s0/s1/s2/s3/s4/s5";

#endif
