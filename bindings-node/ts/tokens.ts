/**
 * Token counting with the core's exact BPE (o200k and cl100k, compiled in:
 * nothing is downloaded) and its fast estimate.
 */
import native from './native';
import { invalidArgument, jsonOf } from './errors';

function modelName(model: unknown): string | undefined {
  if (model === undefined || typeof model === 'string') return model;
  throw invalidArgument('model', model, 'must be a model name');
}

/** Exact tokens of `text` in the encoding `model` uses (gpt-4o's by default). */
export function countTokens(text: string, model?: string): number {
  if (typeof text !== 'string') throw invalidArgument('text', text, 'must be a string');
  return native.countTokens(text, modelName(model));
}

/** The fast estimate of `text` in o200k tokens: no BPE, about 6.5% median error. */
export function estimateTokens(text: string): number {
  if (typeof text !== 'string') throw invalidArgument('text', text, 'must be a string');
  return native.estimateTokens(text);
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
  return native.nativeCountChatTokens(jsonOf('messages', messages), model, tools ? jsonOf('tools', tools) : undefined);
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
