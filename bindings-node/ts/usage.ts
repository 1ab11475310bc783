/**
 * Usage as callers have it: llmgov's own shape, or the `usage` object of an
 * OpenAI (Chat Completions or Responses) or Anthropic answer.
 */
import { invalidArgument } from './errors';

/** Actual usage in llmgov's terms: `inputTokens` is required, the others default to 0. */
export interface Usage {
  /** Prompt tokens, cached ones included. */
  inputTokens: number;
  /** The part of them read from the prompt cache. */
  cachedInputTokens?: number;
  /** Completion tokens. */
  outputTokens?: number;
}

/** OpenAI Chat Completions `usage`. */
export interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
}

/** OpenAI Responses `usage`. */
export interface OpenAIResponsesUsage {
  input_tokens: number;
  output_tokens: number;
  input_tokens_details?: { cached_tokens?: number | null } | null;
}

/** Anthropic Messages `usage`: input excludes cache reads and writes. */
export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
}

/** Anything `Permit.settle` accepts. */
export type AnyUsage = Usage | OpenAIUsage | OpenAIResponsesUsage | AnthropicUsage;

/** A field given: neither absent nor `null` (SDKs send `null` for "none"). */
const present = (value: unknown): boolean => value !== undefined && value !== null;

/**
 * `[input, cached, output]` from any usage shape. The input must be there
 * (`prompt_tokens`, `input_tokens` or `inputTokens`): an object with none of
 * them is not a usage (`{}`, a misspelt `input_token`), and settling it as
 * zero tokens would refund the whole reservation.
 */
export function normalizeUsage(usage: AnyUsage): [number, number, number] {
  if (usage === null || typeof usage !== 'object') {
    throw invalidArgument('usage', usage, 'must be an object such as { inputTokens, outputTokens }');
  }
  const u = usage as Record<string, any>;
  if (present(u.prompt_tokens)) {
    const cached = u.prompt_tokens_details?.cached_tokens ?? 0;
    return [u.prompt_tokens, cached, outputOf(u, 'prompt_tokens', 'completion_tokens')];
  }
  if (present(u.input_tokens)) {
    const output = outputOf(u, 'input_tokens', 'output_tokens');
    if (present(u.cache_read_input_tokens) || present(u.cache_creation_input_tokens)) {
      // Anthropic counts cache reads and writes apart from input_tokens;
      // llmgov's input includes them, as OpenAI's prompt_tokens does.
      const read = u.cache_read_input_tokens ?? 0;
      const written = u.cache_creation_input_tokens ?? 0;
      return [sum('input_tokens', u.input_tokens, read, written), read, output];
    }
    const cached = u.input_tokens_details?.cached_tokens ?? 0;
    return [u.input_tokens, cached, output];
  }
  if (present(u.inputTokens)) return [u.inputTokens, u.cachedInputTokens ?? 0, outputOf(u, 'inputTokens', 'outputTokens')];
  throw invalidArgument(
    'usage',
    usage,
    'is not a usage: it has neither `prompt_tokens` (OpenAI) nor `input_tokens` (Anthropic) nor `inputTokens` (llmgov)',
  );
}

/**
 * The output count of a usage of the shape `inputKey` chose (0 when
 * `outputKey` is absent or `null`). Absent, another key naming an output
 * count (`output_tokens` beside `inputTokens`, a misspelt
 * `completion_token`) is refused rather than ignored: the settle would
 * refund the whole output reservation. Other keys (`total_tokens`,
 * `completion_tokens_details`) are ignored, as SDKs send them.
 */
export function outputOf(u: Record<string, any>, inputKey: string, outputKey: string): number {
  const output = u[outputKey];
  if (present(output)) return output;
  for (const key in u) {
    if (key === outputKey) continue; // there, but null
    const squashed = key.toLowerCase().replace(/_/g, '').replace(/s$/, '');
    if (squashed === 'outputtoken' || squashed === 'completiontoken') {
      throw invalidArgument(`usage.${key}`, u[key], `is not read: a usage with \`${inputKey}\` gives its output as \`${outputKey}\``);
    }
  }
  return 0;
}

function sum(field: string, ...parts: unknown[]): number {
  let total = 0;
  for (const part of parts) {
    if (typeof part !== 'number') throw invalidArgument(field, part, 'must be a number');
    total += part;
  }
  return total;
}
