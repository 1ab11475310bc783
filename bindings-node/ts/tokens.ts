/**
 * Token counting with the core's exact BPE (o200k and cl100k, compiled in:
 * nothing is downloaded) and its fast estimate.
 */
import native from './native';
import { invalidArgument, isWellFormed, jsonOf, LONE_SURROGATE, wellFormed } from './errors';

function modelName(model: unknown): string | undefined {
  if (model === undefined || typeof model === 'string') return model;
  throw invalidArgument('model', model, 'must be a model name');
}

/** Exact tokens of `text` in the encoding `model` uses (gpt-4o's by default). */
export function countTokens(text: string, model?: string): number {
  if (typeof text !== 'string') throw invalidArgument('text', text, 'must be a string');
  return native.countTokens(wellFormed('text', text), modelName(model));
}

/** The fast estimate of `text` in o200k tokens: no BPE, about 6.5% median error. */
export function estimateTokens(text: string): number {
  if (typeof text !== 'string') throw invalidArgument('text', text, 'must be a string');
  return native.estimateTokens(wellFormed('text', text));
}

/**
 * Prompt tokens of a chat request: per-message framing, names, tool calls,
 * images (by OpenAI's tile rule, 1024 × 1024 when the size is not given),
 * tool definitions and the reply priming, as OpenAI counts them.
 * Accepts OpenAI and Anthropic message shapes.
 */
export function countChatTokens(messages: readonly unknown[], model: string, tools?: readonly unknown[]): number {
  if (!Array.isArray(messages)) throw invalidArgument('messages', messages, 'must be an array of messages');
  if (typeof model !== 'string') throw invalidArgument('model', model, 'must be a model name');
  messages.forEach(checkMessage);
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw invalidArgument('tools', tools, 'must be an array of tool definitions');
  const json = wellFormedJson('messages', messages, jsonOf('messages', messages));
  const toolsJson = tools ? wellFormedJson('tools', tools, jsonOf('tools', tools)) : undefined;
  return native.nativeCountChatTokens(json, model, toolsJson);
}

/**
 * A lone surrogate's escape in JSON.stringify's text (`\ud800`, behind an
 * even number of backslashes): it escapes nothing else in that range, as
 * it writes a surrogate pair as itself.
 */
const LONE_ESCAPE = /(?<!\\)(?:\\\\)*\\ud[89a-f]/;

/**
 * `json` (of `value`, given as `field`), refused if it holds a lone UTF-16
 * surrogate: the addon's JSON parser would fail on it ("unexpected end of
 * hex escape"), and as UTF-8 it would be U+FFFD. The error names the
 * string that holds it, e.g. `messages[0].content`.
 */
function wellFormedJson(field: string, value: unknown, json: string): string {
  if (LONE_ESCAPE.test(json)) throw loneSurrogate(value, field) ?? invalidArgument(field, value, LONE_SURROGATE);
  return json;
}

/** The error naming the first string (or key) in `value` holding a lone surrogate, if any. */
function loneSurrogate(value: unknown, path: string): Error | undefined {
  if (typeof value === 'string') return isWellFormed(value) ? undefined : invalidArgument(path, value, LONE_SURROGATE);
  if (value === null || typeof value !== 'object') return undefined; // JSON.stringify had no cycle
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const error = loneSurrogate(value[i], `${path}[${i}]`);
      if (error) return error;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (!isWellFormed(key)) return invalidArgument(path, key, `has a key that ${LONE_SURROGATE}`);
    const error = loneSurrogate(item, `${path}.${key}`);
    if (error) return error;
  }
  return undefined;
}

/** A message is an object; its content, if any, text or an array of parts. */
function checkMessage(message: unknown, i: number): void {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) {
    throw invalidArgument(`messages[${i}]`, message, 'must be a message object such as { role, content }');
  }
  const content = (message as { content?: unknown }).content;
  if (content !== undefined && content !== null && typeof content !== 'string' && !Array.isArray(content)) {
    throw invalidArgument(`messages[${i}].content`, content, 'must be a string or an array of content parts');
  }
}
