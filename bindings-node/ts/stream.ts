/**
 * Streamed answers: passes a server-sent-event body through untouched while
 * reading the usage it reports (OpenAI's final `usage` chunk, Anthropic's
 * `message_start` and `message_delta`), and settles the permit once when the
 * stream ends, fails, or is cancelled by its reader.
 */
import { AnyUsage } from './usage';
import { estimateTokens } from './tokens';

/** Usage read from a stream so far. */
class StreamUsage {
  /** The provider's own usage, when it reported one. */
  reported: Record<string, any> | null = null;
  /** Anthropic reports input at the start and output at the end. */
  anthropicStart: Record<string, any> | null = null;
  /** Streamed text, to estimate the output when no usage comes. */
  text = '';

  read(event: any): void {
    if (event === null || typeof event !== 'object') return;
    if (event.usage && typeof event.usage === 'object') {
      // OpenAI: the last chunk (stream_options.include_usage); Anthropic: message_delta.
      this.reported = event.type === 'message_delta' ? merged(this.anthropicStart, event.usage) : event.usage;
    }
    if (event.type === 'message_start' && event.message?.usage) {
      this.anthropicStart = event.message.usage;
      this.reported = event.message.usage;
    }
    for (const choice of Array.isArray(event.choices) ? event.choices : []) {
      const content = choice?.delta?.content;
      if (typeof content === 'string') this.text += content;
    }
    if (event.type === 'content_block_delta' && typeof event.delta?.text === 'string') this.text += event.delta.text;
  }

  /** The usage to settle with: the reported one, or the streamed text's estimate. */
  usage(inputTokens: number): AnyUsage {
    const r = this.reported;
    if (r && (r.completion_tokens !== undefined || r.output_tokens !== undefined)) return r as AnyUsage;
    return { inputTokens, outputTokens: this.text ? estimateTokens(this.text) : 0 };
  }
}

/**
 * `base` updated with the fields of `update` that are not `null`: the SDKs
 * type message_delta's input and cache counts as `number | null`, and a
 * `null` there means "not reported here", not "none".
 */
function merged(base: Record<string, any> | null, update: Record<string, any>): Record<string, any> {
  const result = { ...base };
  for (const [key, value] of Object.entries(update)) if (value !== null && value !== undefined) result[key] = value;
  return result;
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
      if (data === '' || data === '[DONE]') continue;
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
 * with the usage when it ends (or fails, or its reader cancels it).
 */
export function meteredStream(
  body: ReadableStream<Uint8Array>,
  inputTokens: number,
  settle: (usage: AnyUsage) => void,
): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  const events = new EventReader();
  const usage = new StreamUsage();
  let settled = false;
  const finish = () => {
    if (settled) return;
    settled = true;
    settle(usage.usage(inputTokens));
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (error) {
        finish();
        controller.error(error);
        return;
      }
      if (chunk.done) {
        for (const event of events.feed(undefined, true)) usage.read(event);
        finish();
        controller.close();
        return;
      }
      for (const event of events.feed(chunk.value)) usage.read(event);
      controller.enqueue(chunk.value);
    },
    async cancel(reason) {
      finish();
      await reader.cancel(reason);
    },
  });
}
