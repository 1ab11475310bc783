/**
 * Usage as callers have it: llmgov's own shape, or the `usage` object of an
 * OpenAI (Chat Completions or Responses) or Anthropic answer.
 */
import { invalidArgument, knownKeys } from './errors';

/**
 * Actual usage in llmgov's terms. Every count left out keeps what the
 * permit holds, as Python's `settle` does: `{ outputTokens: n }` keeps the
 * input estimate, `{ inputTokens: n }` the output reserved (and the cached
 * input reserved, up to `n`).
 */
export interface Usage {
  /** Prompt tokens, cached ones included (left out: the estimate). */
  inputTokens?: number;
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
  // Each count is checked under the name it was given, not llmgov's.
  if (present(u.prompt_tokens)) {
    const output = counted('completion_tokens', outputOf(u, 'prompt_tokens', 'completion_tokens'));
    const cached = counted('prompt_tokens_details.cached_tokens', u.prompt_tokens_details?.cached_tokens ?? 0);
    return [counted('prompt_tokens', u.prompt_tokens), cached, output];
  }
  if (present(u.input_tokens)) {
    const output = counted('output_tokens', outputOf(u, 'input_tokens', 'output_tokens'));
    const input = counted('input_tokens', u.input_tokens);
    if (present(u.cache_read_input_tokens) || present(u.cache_creation_input_tokens)) {
      // Anthropic counts cache reads and writes apart from input_tokens;
      // llmgov's input includes them, as OpenAI's prompt_tokens does.
      const read = counted('cache_read_input_tokens', u.cache_read_input_tokens ?? 0);
      const written = counted('cache_creation_input_tokens', u.cache_creation_input_tokens ?? 0);
      return [input + read + written, read, output];
    }
    return [input, counted('input_tokens_details.cached_tokens', u.input_tokens_details?.cached_tokens ?? 0), output];
  }
  if (present(u.inputTokens)) return ownCounts(u, NOTHING_HELD);
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

function counted(field: string, value: unknown): number {
  if (typeof value !== 'number') throw invalidArgument(field, value, 'must be a number');
  return value;
}

/** What a permit holds, `[input, cached, output]`: the counts a usage leaves out keep them. */
export type Held = () => [number, number, number];

const NOTHING_HELD: Held = () => [0, 0, 0];

/** The keys of llmgov's own usage. */
const OWN_FIELDS = new Set(['inputTokens', 'cachedInputTokens', 'outputTokens']);

/**
 * `[input, cached, output]` of what `settle` was given: nothing (settled as
 * `held`, as estimated), llmgov's usage, or a provider's. llmgov's is one
 * with `inputTokens`, or without a provider's input key, with
 * `outputTokens` or `cachedInputTokens`.
 */
export function usageCounts(usage: AnyUsage | undefined, held: Held): [number, number, number] {
  if (usage === undefined) return held();
  const u = usage as Record<string, any>;
  if (u !== null && typeof u === 'object') {
    const own = present(u.inputTokens)
      || (!present(u.prompt_tokens) && !present(u.input_tokens) && (u.outputTokens !== undefined || u.cachedInputTokens !== undefined));
    if (own) return ownCounts(u, held);
  }
  return normalizeUsage(usage);
}

/**
 * llmgov's usage. Any key but its three is refused, naming it, as
 * `tryAcquire` refuses one: a misspelt count would be settled as 0, or as
 * reserved. An output under another shape's key is named first, with the
 * key to use.
 */
function ownCounts(u: Record<string, any>, held: Held): [number, number, number] {
  if (u.outputTokens === undefined) outputOf(u, 'inputTokens', 'outputTokens'); // names a misplaced output
  for (const key in u) if (!OWN_FIELDS.has(key)) knownKeys(u, OWN_FIELDS, 'a usage');
  const [heldInput, heldCached, heldOutput] = held();
  const input = u.inputTokens === undefined ? heldInput : counted('inputTokens', u.inputTokens);
  const cached = u.cachedInputTokens === undefined ? Math.min(heldCached, input) : counted('cachedInputTokens', u.cachedInputTokens);
  const output = u.outputTokens === undefined ? heldOutput : counted('outputTokens', u.outputTokens);
  return [input, cached, output];
}
