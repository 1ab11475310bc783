/**
 * `governedFetch`: a `fetch` that asks the governor first. It fits as the
 * `fetch` option of openai-node and of the Anthropic SDK, so a client is
 * governed with one line:
 *
 * ```js
 * const client = new OpenAI({ fetch: governedFetch(gov, fetch, { paths: ['openai/org/gpt-4o'] }), maxRetries: 0 });
 * ```
 *
 * For each request it estimates the input from the request JSON (messages,
 * system prompt, tools) and reads `max_tokens`; reserves (waiting for
 * capacity, or failing at once with `wait: false`); sends; reports the
 * answer's rate-limit headers back to the governor; settles the permit from
 * the answer's `usage` (for a stream, from its final usage chunk, when the
 * stream ends); and on a 408, 409, 429, 5xx (each refunded) or a
 * connection error follows the retry advice, going back through admission
 * for each retry. Turn the SDK's own
 * retries off (`maxRetries: 0`): one layer retries, this one.
 *
 * `gov` may be a `RedisGovernor`: the budget is then shared across
 * processes, answers are reported into the route's local scopes, and its
 * permits reconcile on the thread pool before the answer (or the stream's
 * end) reaches the caller. It has no traffic classes, so `klass` is refused.
 */
import native from './native';
import { Governor, Route } from './governor';
import { RedisGovernor } from './redis';
import type { RedisRoute } from './redis';
import {
  cancelUnlessExpired, HeldPermit, localPermit, redisPermit, settleAsEstimated, settleFromProvider, settleInput,
} from './fetch-permit';
import { RetryPolicy, RetryOptions } from './feedback';
import { invalidArgument, knownKeys } from './errors';
import { meteredStream } from './stream';
import { AnyUsage } from './usage';

/** The request as the governed fetch sees it, for `paths` and `klass` functions. */
export interface GovernedRequest {
  /** The URL. */
  url: URL;
  /** `openai` (Chat Completions), `responses` (OpenAI Responses), `anthropic` or `other`, from the URL. */
  api: 'openai' | 'responses' | 'anthropic' | 'other';
  /** The parsed JSON body, or `undefined`. */
  body: Record<string, any> | undefined;
  /** The request's headers. */
  headers: Headers;
}

/** Options of {@link governedFetch}. */
export interface GovernedFetchOptions {
  /** Scope paths to charge, or a function of the request (per tenant, per model). */
  paths: readonly string[] | ((request: GovernedRequest) => readonly string[]);
  /** Traffic class, or a function of the request (not with a `RedisGovernor`, which has none). */
  klass?: string | ((request: GovernedRequest) => string | undefined);
  /** `exact` (BPE, the default) or `fast` (the estimate) input counting. */
  counting?: 'exact' | 'fast';
  /** Output to reserve when a request sets no `max_tokens` (default 1024). */
  defaultMaxOutputTokens?: number;
  /**
   * Add `stream_options.include_usage` to streamed OpenAI requests, so that
   * streams settle with the provider's count rather than an estimate
   * (default false: the stream's consumer then sees one more chunk, with
   * empty `choices` and the usage).
   */
  includeUsage?: boolean;
  /** Wait for capacity (default), or throw `RateLimitedError` at once. */
  wait?: boolean;
  /** Retry policy options, a shared {@link RetryPolicy}, or `false` never to retry. */
  retry?: RetryOptions | RetryPolicy | false;
  /** The longest one call may take, retries and waits included, in ms. */
  deadlineMs?: number;
  /** Called after each attempt, for logging and tests. */
  onAttempt?: (event: AttemptEvent) => void;
}

/** One attempt's outcome, for `onAttempt`. */
export interface AttemptEvent {
  /** 0 for the first attempt. */
  attempt: number;
  /** The HTTP status, or `undefined` after a connection error. */
  status: number | undefined;
  /** `retry` with `delayMs`, or `done`. */
  next: 'retry' | 'done';
  /** With `retry`: the wait before it. */
  delayMs?: number;
}

type Fetch = (input: any, init?: any) => Promise<Response>;

function apiOf(url: URL): GovernedRequest['api'] {
  if (url.pathname.endsWith('/messages')) return 'anthropic';
  if (url.pathname.endsWith('/responses')) return 'responses';
  if (url.pathname.endsWith('/chat/completions') || url.pathname.endsWith('/completions')) return 'openai';
  return 'other';
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

const isStream = (response: Response) => (response.headers.get('content-type') ?? '').includes('text/event-stream');

/**
 * The response again, from a body already read. fetch has decoded that
 * body, so the content-encoding is dropped and a content-length made the
 * decoded length (unknown for a stream): a reader trusting them would
 * decode twice or cut it short.
 */
function rebuilt(original: Response, body: string | Uint8Array | ReadableStream<Uint8Array>): Response {
  const headers = new Headers(original.headers);
  headers.delete('content-encoding');
  if (body instanceof ReadableStream) headers.delete('content-length');
  else if (headers.has('content-length')) headers.set('content-length', String(typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength));
  const response = new Response(body, { status: original.status, statusText: original.statusText, headers });
  Object.defineProperty(response, 'url', { value: original.url });
  return response;
}

const OPTIONS = new Set([
  'paths', 'klass', 'counting', 'defaultMaxOutputTokens', 'includeUsage', 'wait', 'retry', 'deadlineMs', 'onAttempt',
]);

/**
 * Refuses a bad option when the fetch is made, not at its first request
 * (or never: a misspelt `includeUsages` would be ignored, a `deadlineMs`
 * of NaN would never end a wait), naming it.
 */
function checkOptions(options: GovernedFetchOptions): void {
  knownKeys(options, OPTIONS, 'governedFetch options');
  const { paths, klass, counting, defaultMaxOutputTokens: max, includeUsage, wait, deadlineMs, onAttempt } = options;
  if (!Array.isArray(paths) && typeof paths !== 'function') throw invalidArgument('paths', paths, 'must be an array of scope paths or a function of the request');
  if (klass !== undefined && typeof klass !== 'string' && typeof klass !== 'function') throw invalidArgument('klass', klass, 'must be a class name or a function of the request');
  if (counting !== undefined && counting !== 'exact' && counting !== 'fast') throw invalidArgument('counting', counting, 'must be "exact" or "fast"');
  if (max !== undefined && !(typeof max === 'number' && Number.isInteger(max) && max > 0)) {
    throw invalidArgument('defaultMaxOutputTokens', max, 'must be a positive integer');
  }
  for (const [field, value] of [['includeUsage', includeUsage], ['wait', wait]] as const) {
    if (value !== undefined && typeof value !== 'boolean') throw invalidArgument(field, value, 'must be true or false');
  }
  if (deadlineMs !== undefined && !(typeof deadlineMs === 'number' && deadlineMs >= 0)) {
    throw invalidArgument('deadlineMs', deadlineMs, 'must be a non-negative number of milliseconds');
  }
  if (onAttempt !== undefined && typeof onAttempt !== 'function') throw invalidArgument('onAttempt', onAttempt, 'must be a function');
}

/**
 * A `fetch` governed by `gov`: reserve, send, report, settle, retry. See the
 * module documentation; `fetchImpl` is the fetch to send with (`fetch`).
 */
export function governedFetch(gov: Governor | RedisGovernor, fetchImpl: Fetch, options: GovernedFetchOptions): Fetch {
  if (!(gov instanceof Governor) && !(gov instanceof RedisGovernor)) throw invalidArgument('gov', gov, 'must be a Governor or a RedisGovernor');
  if (typeof fetchImpl !== 'function') throw invalidArgument('fetch', fetchImpl, 'must be a fetch function');
  if (options === null || typeof options !== 'object' || options.paths === undefined) {
    throw invalidArgument('paths', undefined, 'governedFetch needs options.paths');
  }
  checkOptions(options);
  // Waiters on shared scopes are not queued, so they have no class.
  if (gov instanceof RedisGovernor && options.klass !== undefined) {
    throw invalidArgument('klass', options.klass, 'a RedisGovernor has no traffic classes: leave it out');
  }
  const policy = options.retry === false ? null
    : options.retry instanceof RetryPolicy ? options.retry
    : new RetryPolicy(options.retry);
  const counting = options.counting ?? 'exact';
  const defaultMax = options.defaultMaxOutputTokens ?? 1024;
  const routeFor = typeof options.paths === 'function' ? options.paths : (() => options.paths) as () => readonly string[];

  return async function governed(input: any, init?: any): Promise<Response> {
    const outgoing = await readOutgoing(input, init);
    const { url, headers, signal } = outgoing;
    let bodyText = outgoing.text;
    const body = bodyText === undefined ? undefined : jsonObject(bodyText);
    const api = apiOf(url);
    const view: GovernedRequest = { url, api, body, headers };
    if (options.includeUsage && api === 'openai' && body?.stream === true && body.stream_options?.include_usage !== true) {
      body.stream_options = { ...body.stream_options, include_usage: true };
      bodyText = JSON.stringify(body);
    }
    const rewritten = bodyText === outgoing.text ? undefined : bodyText;
    // Not a JSON object (or no body): its text's estimate and no output, as Python's transport reserves.
    const estimate = body !== undefined
      ? estimateJson(bodyText!, api, counting)
      : { inputTokens: bodyText ? native.estimateTokens(bodyText) : 0, maxOutputTokens: 0, model: undefined };
    const route: Route | RedisRoute = gov.route(routeFor(view));
    const klass = typeof options.klass === 'function' ? options.klass(view) : options.klass;
    const admission = {
      route,
      inputTokens: estimate.inputTokens,
      // An API of no known shape (embeddings, say) produces no output unless its body caps one.
      maxOutputTokens: estimate.maxOutputTokens ?? (api === 'other' ? 0 : defaultMax),
      klass,
    };
    const started = Date.now();
    const left = () => (options.deadlineMs === undefined ? undefined : Math.max(0, options.deadlineMs - (Date.now() - started)));

    for (let attempt = 0; ; attempt++) {
      const permit = await admit(gov, admission, options.wait ?? true, signal, left());
      if (attempt === 0) policy?.recordRequest();
      let response: Response;
      try {
        response = await fetchImpl(...outgoing.attempt(rewritten));
      } catch (error) {
        if (signal?.aborted) {
          // The caller gave up: whatever was sent, nothing more will be read.
          await permit.cancel();
          throw error;
        }
        if (neverSent(error)) await cancelUnlessExpired(permit);
        // It may have reached the provider: keep the input charged.
        else await settleInput(permit, estimate.inputTokens);
        const advice = policy?.advise({ attempt, deadlineInMs: left() });
        options.onAttempt?.({ attempt, status: undefined, next: advice?.advice === 'retry_after' ? 'retry' : 'done', delayMs: advice?.delayMs });
        if (advice?.advice !== 'retry_after') throw error;
        await sleep(advice.delayMs ?? 0, signal);
        continue;
      }
      if (response.ok) return answered(permit, response, estimate, (event) => options.onAttempt?.({ attempt, ...event }));
      const text = await refused(permit, response);
      const advice = policy?.advise({ attempt, status: response.status, headers: response.headers, body: text, deadlineInMs: left() });
      const retry = advice?.advice === 'retry_after';
      options.onAttempt?.({ attempt, status: response.status, next: retry ? 'retry' : 'done', delayMs: advice?.delayMs });
      if (!retry) return rebuilt(response, text);
      await sleep(advice!.delayMs ?? 0, signal);
    }
  };
}

/**
 * A successful answer: reports it and settles the permit from its usage
 * (a stream's, when the stream ends). Whatever fails on the way (the body's
 * read, `onAttempt`) is thrown after the permit is settled as estimated: the
 * provider did the work, and a permit left pending would hold its
 * reservation until the TTL.
 */
async function answered(
  permit: HeldPermit,
  response: Response,
  estimate: { inputTokens: number; model?: string | null },
  onAttempt: (event: Omit<AttemptEvent, 'attempt'>) => void,
): Promise<Response> {
  let handedOver = false;
  try {
    permit.report(response.status, response.headers, '');
    if (isStream(response) && response.body) {
      try {
        onAttempt({ status: response.status, next: 'done' });
      } catch (error) {
        await response.body.cancel().catch(() => undefined);
        throw error;
      }
      const metered = meteredStream(response.body, estimate.inputTokens, estimate.model ?? undefined, (usage, seen) =>
        settleFromProvider(permit, usage, () => ({ inputTokens: estimate.inputTokens, outputTokens: seen() })));
      handedOver = true;
      return rebuilt(response, metered);
    }
    // Bytes, not text: audio, images and files would not survive a UTF-8 round trip.
    const bytes = new Uint8Array(await response.arrayBuffer());
    // No usage says nothing of the output: the provider did the work, so as estimated, as Python settles it.
    const usage = usageOf(response, bytes);
    if (usage) await settleFromProvider(permit, usage);
    else await settleAsEstimated(permit);
    onAttempt({ status: response.status, next: 'done' });
    return rebuilt(response, bytes);
  } finally {
    if (!handedOver) await settleAsEstimated(permit);
  }
}

/**
 * A refused or failed answer: reads its body, reports it, and refunds the
 * permit. The provider did not serve it, a 429 or 5xx included: the report
 * (a 429 holds the provider's bucket empty until its retry-after) and the
 * retry advice pace the retries, as in Python's transport, which refunds
 * each refused attempt. A body that fails to read is thrown after.
 */
async function refused(permit: HeldPermit, response: Response): Promise<string> {
  let text = '';
  try {
    text = await response.text();
  } finally {
    try {
      permit.report(response.status, response.headers, text);
    } finally {
      if (permit.pending) await cancelUnlessExpired(permit);
    }
  }
  return text;
}

/** A request read once: to estimate it, and to send it again on each attempt. */
interface Outgoing {
  url: URL;
  headers: Headers;
  signal: AbortSignal | undefined;
  /** The body as text (invalid UTF-8 replaced), `undefined` without one. */
  text: string | undefined;
  /** The fetch arguments of one attempt, with `body` in place of the original when given. */
  attempt(body: string | undefined): [any, any];
}

/** Bodies fetch can send any number of times; streams (a Request's too) it reads once. */
const resendable = (body: unknown): boolean =>
  typeof body === 'string' || body instanceof ArrayBuffer || ArrayBuffer.isView(body) || body instanceof Blob
  || body instanceof URLSearchParams || body instanceof FormData;

/**
 * Reads the body of `fetch(input, init)` before the first attempt: a
 * Request's body, or a stream, can be read only once, and the estimate
 * needs it as much as every retry does. Each attempt then gets a fresh
 * Request over the bytes read.
 */
async function readOutgoing(input: any, init: any): Promise<Outgoing> {
  const request = input instanceof Request ? input : undefined;
  const url = new URL(request ? request.url : String(input));
  const headers = new Headers(init?.headers ?? request?.headers);
  const signal: AbortSignal | undefined = init?.signal ?? request?.signal ?? undefined;
  // As fetch does: init's body, when given, replaces the Request's.
  const given = init?.body ?? undefined;
  let text: string | undefined;
  let body: unknown = given;
  if (typeof given === 'string') {
    text = given;
  } else if (given !== undefined) {
    const bytes = new Uint8Array(await new Response(given).arrayBuffer());
    text = new TextDecoder().decode(bytes);
    if (!resendable(given)) body = bytes;
  } else if (request?.body) {
    body = new Uint8Array(await request.arrayBuffer());
    text = new TextDecoder().decode(body as Uint8Array);
  }
  const attempt = (rewritten: string | undefined): [any, any] => {
    const send = rewritten ?? body;
    // A rewritten body (include_usage) has another length than the one given.
    const sendInit = rewritten === undefined ? { ...init, body: send } : { ...init, body: send, headers: withoutLength(headers) };
    if (request) return send === undefined ? [request, init] : [new Request(request, sendInit), undefined];
    return [input, send === undefined ? init : sendInit];
  };
  return { url, headers, signal, text, attempt };
}

function withoutLength(headers: Headers): Headers {
  const copy = new Headers(headers);
  copy.delete('content-length');
  return copy;
}

/** `text` parsed when it is a JSON object; anything else is estimated as text. */
function jsonObject(text: string): Record<string, any> | undefined {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The core's estimate of a JSON body; one its parser refuses though
 * JavaScript wrote it (a lone surrogate, which `JSON.stringify` escapes as
 * `\ud800`) is estimated from its text: the provider may serve it, so it
 * is not stopped here.
 */
function estimateJson(text: string, api: GovernedRequest['api'], counting: string): { inputTokens: number; maxOutputTokens?: number | null; model?: string | null } {
  try {
    return native.nativeEstimateRequest(text, api, counting);
  } catch {
    return { inputTokens: native.estimateTokens(text), maxOutputTokens: undefined, model: undefined };
  }
}

/** Reserves: waits for capacity, or answers at once with `wait: false`. */
async function admit(
  gov: Governor | RedisGovernor,
  request: { route: Route | RedisRoute; inputTokens: number; maxOutputTokens: number; klass?: string },
  wait: boolean,
  signal: AbortSignal | undefined,
  deadlineMs: number | undefined,
): Promise<HeldPermit> {
  if (gov instanceof RedisGovernor) {
    const shared = { route: request.route as RedisRoute, inputTokens: request.inputTokens, maxOutputTokens: request.maxOutputTokens };
    return redisPermit(await (wait ? gov.acquire({ ...shared, signal, deadlineMs }) : gov.tryAcquire(shared)));
  }
  const local = { ...request, route: request.route as Route };
  return localPermit(await (wait ? gov.acquire({ ...local, signal, deadlineMs }) : gov.tryAcquire(local)));
}

/**
 * The `usage` of a JSON answer, if it has one. The bytes are decoded only
 * when they may be a JSON object (a JSON content-type, or a `{` first), not
 * for every file an answer carries.
 */
function usageOf(response: Response, bytes: Uint8Array): AnyUsage | undefined {
  const json = (response.headers.get('content-type') ?? '').includes('json');
  if (!json && firstNonSpace(bytes) !== 0x7b) return undefined;
  try {
    const usage = JSON.parse(new TextDecoder().decode(bytes))?.usage;
    return usage && typeof usage === 'object' ? usage : undefined;
  } catch {
    return undefined;
  }
}

function firstNonSpace(bytes: Uint8Array): number | undefined {
  for (const byte of bytes) if (byte !== 0x20 && byte !== 0x09 && byte !== 0x0a && byte !== 0x0d) return byte;
  return undefined;
}

/**
 * Errors raised before a request could leave (fetch's, undici's and
 * Node's codes, on the error or its `cause`): no connection, no address, a
 * connect timeout. As Python's transport refunds a ConnectError; anything
 * else (a reset, a closed socket) may have reached the provider.
 */
const NEVER_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

function neverSent(error: unknown): boolean {
  const codeOf = (e: unknown) => (e !== null && typeof e === 'object' ? (e as { code?: unknown }).code : undefined);
  return [codeOf(error), codeOf((error as { cause?: unknown } | null)?.cause)].some((code) => typeof code === 'string' && NEVER_SENT.has(code));
}
