/**
 * Streamed answers: passes a server-sent-event body through untouched while
 * reading the usage it reports (OpenAI's final `usage` chunk, Anthropic's
 * `message_start` and `message_delta`, the Responses API's
 * `response.completed`), and settles the permit once when the stream ends,
 * fails, or is cancelled by its reader. The reading is Python's
 * `_wire.StreamUsage`, event for event, so that a stream settles the same
 * in both.
 */
import native from './native';
import { AnyUsage } from './usage';

/** The `data: [DONE]` that ends an OpenAI chat stream. */
const DONE = Symbol('[DONE]');

/** Usage read from a stream so far. */
class StreamUsage {
  /** The provider's usage, its reports merged (Anthropic's come in two). */
  usage: Record<string, any> | null = null;
  /** Streamed text, to count the output when no usage (or too little) came. */
  text = '';
  /** Whether the stream's end marker came (`[DONE]`, `message_stop`, `response.completed`). */
  done = false;

  constructor(readonly model: string | undefined) {}

  read(event: unknown): void {
    if (event === DONE) {
      this.done = true;
      return;
    }
    if (event === null || typeof event !== 'object' || Array.isArray(event)) return;
    const e = event as Record<string, any>;
    switch (e.type) {
      case 'message_start':
        return this.#merge(e.message?.usage);
      case 'message_delta':
        return this.#merge(e.usage);
      case 'message_stop':
        this.done = true;
        return;
      case 'content_block_delta':
        // Text, a tool call's JSON as it streams, or extended thinking.
        for (const key of ['text', 'partial_json', 'thinking']) {
          if (typeof e.delta?.[key] === 'string') this.text += e.delta[key];
        }
        return;
      case 'response.completed':
      case 'response.incomplete':
        this.#merge(e.response?.usage);
        this.done = true;
        return;
      case 'response.output_text.delta':
      case 'response.function_call_arguments.delta':
        if (typeof e.delta === 'string') this.text += e.delta;
        return;
    }
    this.#merge(e.usage);
    for (const choice of Array.isArray(e.choices) ? e.choices : []) {
      const content = choice?.delta?.content;
      if (typeof content === 'string') this.text += content;
      for (const call of Array.isArray(choice?.delta?.tool_calls) ? choice.delta.tool_calls : []) {
        if (typeof call?.function?.arguments === 'string') this.text += call.function.arguments;
      }
    }
  }

  /**
   * Only the fields that are not `null`: the SDKs type message_delta's
   * input and cache counts as `number | null`, and a `null` there means
   * "not reported here", not "none".
   */
  #merge(usage: unknown): void {
    if (usage === null || typeof usage !== 'object' || Array.isArray(usage)) return;
    const merged = { ...this.usage };
    for (const [key, value] of Object.entries(usage)) if (value !== null && value !== undefined) merged[key] = value;
    this.usage = merged;
  }

  /**
   * The usage to settle with: the reported one, when the stream finished
   * and it gives the output. Otherwise (cut short, or no output reported:
   * message_start's `output_tokens: 1` is no count of a stream cut after a
   * thousand tokens) the larger of the streamed text's tokens and the
   * reported output, beside the reported input, or the estimate's.
   */
  settleWith(inputTokens: number): AnyUsage {
    const usage = { ...this.usage };
    const reported = usage.output_tokens ?? usage.completion_tokens;
    if (Object.keys(usage).length > 0 && this.done && reported !== undefined) return usage as AnyUsage;
    const output = Math.max(this.seen(), typeof reported === 'number' ? reported : 0);
    if ('prompt_tokens' in usage) return { ...usage, completion_tokens: output } as AnyUsage;
    if ('input_tokens' in usage) return { ...usage, output_tokens: output } as AnyUsage;
    return { inputTokens, outputTokens: output };
  }

  /** Tokens of the text streamed so far (the BPE of the request's model, as Python counts). */
  seen(): number {
    return this.text ? native.countTokens(this.text, this.model) : 0;
  }
}

/** Splits server-sent events into their `data:` payloads as bytes arrive. */
class EventReader {
  readonly #decoder = new TextDecoder();
  #buffer = '';

  *feed(bytes: Uint8Array | undefined, done = false): Generator<unknown> {
    this.#buffer += bytes ? this.#decoder.decode(bytes, { stream: !done }) : this.#decoder.decode();
    let newline: number;
    while ((newline = this.#buffer.indexOf('\n')) >= 0) {
      const line = this.#buffer.slice(0, newline).replace(/\r$/, '');
      this.#buffer = this.#buffer.slice(newline + 1);
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '') continue;
      if (data === '[DONE]') {
        yield DONE;
        continue;
      }
      try {
        yield JSON.parse(data);
      } catch {
        // Not JSON: nothing about usage to read in it.
      }
    }
  }
}

/**
 * The body of `response`, read through unchanged, calling `settle` once
 * when it ends (or fails, or its reader cancels it) with the usage to
 * settle and the output the stream carried (for a usage the governor
 * refuses: Python then settles that output, the input as estimated).
 */
export function meteredStream(
  body: ReadableStream<Uint8Array>,
  inputTokens: number,
  model: string | undefined,
  settle: (usage: AnyUsage, seen: () => number) => Promise<void>,
): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  const events = new EventReader();
  const usage = new StreamUsage(model);
  let settled = false;
  // Awaited before the stream ends, so that a failed settle errors the
  // stream rather than going unheard.
  const finish = async () => {
    if (settled) return;
    settled = true;
    await settle(usage.settleWith(inputTokens), () => usage.seen());
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (error) {
        await finish();
        controller.error(error);
        return;
      }
      if (chunk.done) {
        for (const event of events.feed(undefined, true)) usage.read(event);
        await finish();
        controller.close();
        return;
      }
      for (const event of events.feed(chunk.value)) usage.read(event);
      controller.enqueue(chunk.value);
    },
    async cancel(reason) {
      await finish();
      await reader.cancel(reason);
    },
  });
}
