/**
 * Provider answers: {@link classifyResponse} reads what an answer says about
 * limits; {@link RetryPolicy} says whether and when to retry it.
 */
import native, { Advice, Classification, RetryOptions } from './native';
import { flattenHeaders, HeadersLike } from './headers';
import { invalidArgument, jsonOf, knownKeys } from './errors';

/** The options `new RetryPolicy(options)` knows. */
const RETRY_OPTIONS = new Set(['maxRetries', 'baseDelayMs', 'maxDelayMs', 'budgetWindowMs', 'budgetRatio', 'budgetMinRetries']);

/** `options` when it is an object (or absent); the field named otherwise. */
function optionsObject<T>(field: string, options: T | undefined, example: string): T | undefined {
  if (options === undefined || (typeof options === 'object' && options !== null && !Array.isArray(options))) return options;
  throw invalidArgument(field, options, `must be an object of options, e.g. ${example}`);
}

/** An optional number the addon converts: its type checked here, its value there. */
function optionalNumber(field: string, value: unknown): number | undefined {
  if (value === undefined || typeof value === 'number') return value;
  throw invalidArgument(field, value, 'must be a number');
}

export type { Advice, AdviceReason, Classification, RetryOptions } from './native';

/** A response body: text, bytes, or an already parsed JSON value. */
export type BodyLike = string | Uint8Array | ArrayBuffer | object | null | undefined;

/** Which provider answered, when the caller knows (`auto` infers it). */
export type Provider =
  | 'auto' | 'openai' | 'azure' | 'groq' | 'anthropic' | 'gemini' | 'bedrock'
  | 'mistral' | 'openrouter' | 'deepseek' | 'together' | 'cohere';

/** Options of {@link classifyResponse}. */
export interface ClassifyOptions {
  /** The provider, when known; inferred from the answer otherwise. */
  provider?: Provider;
  /** The wall clock in Unix milliseconds, for resets given as dates (now by default). */
  nowMs?: number;
}

/** The body as text, for the classifier. */
export function bodyText(body: BodyLike): string {
  if (body === undefined || body === null) return '';
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  if (body instanceof ArrayBuffer) return Buffer.from(body).toString('utf8');
  if (typeof body === 'object') return jsonOf('body', body);
  throw invalidArgument('body', body, 'must be a string, bytes or a JSON object');
}

export function checkStatus(status: unknown): number {
  if (typeof status !== 'number') throw invalidArgument('status', status, 'must be an HTTP status code');
  return status;
}

/**
 * Reads what a provider's answer says about its limits: whether it was
 * refused and why, which limit, how long to wait, what remains.
 *
 * ```js
 * const c = classifyResponse(429, { 'retry-after': '20' }, '{"error":{"code":"rate_limit_exceeded"}}');
 * c.kind;          // 'rate_limited'
 * c.retryAfterMs;  // 20000
 * ```
 */
export function classifyResponse(
  status: number,
  headers?: HeadersLike | null,
  body?: BodyLike,
  options: ClassifyOptions = {},
): Classification {
  const { provider, nowMs } = optionsObject('options', options, '{ provider, nowMs }') ?? {};
  if (provider !== undefined && typeof provider !== 'string') throw invalidArgument('provider', provider, 'must be a provider name');
  return native.nativeClassifyResponse(
    checkStatus(status),
    flattenHeaders(headers),
    bodyText(body),
    provider,
    optionalNumber('nowMs', nowMs),
  );
}

/** What the last attempt ended in, for {@link RetryPolicy.advise}. */
export interface AttemptOutcome {
  /** Retries already made for this request (0 after the first attempt failed). */
  attempt: number;
  /** The answer's status; leave it out for a connection error (no answer). */
  status?: number;
  /** The answer's headers. */
  headers?: HeadersLike | null;
  /** The answer's body. */
  body?: BodyLike;
  /** Milliseconds left until the request's deadline, if it has one. */
  deadlineInMs?: number;
}

/**
 * Retry advice: the provider's retry-after or full-jitter exponential
 * backoff, whichever is longer; only what waiting can fix; at most
 * `maxRetries` per request; never past the deadline; within a retry budget
 * shared by every request that uses the same policy.
 */
export class RetryPolicy {
  readonly #native: InstanceType<typeof native.RetryPolicy>;

  constructor(options?: RetryOptions) {
    optionsObject('options', options, '{ maxRetries: 2 }');
    knownKeys(options, RETRY_OPTIONS, 'RetryPolicy options');
    for (const key of RETRY_OPTIONS) optionalNumber(key, options?.[key as keyof RetryOptions]);
    this.#native = new native.RetryPolicy(options);
  }

  /** Counts one first attempt in the retry budget (never a retry). */
  recordRequest(): void {
    this.#native.recordRequest();
  }

  /** Advises on a failed attempt; a `retry_after` advice takes a budget token. */
  advise(outcome: AttemptOutcome): Advice {
    if (outcome === null || typeof outcome !== 'object') {
      throw invalidArgument('outcome', outcome, 'must be an object such as { attempt, status, headers, body }');
    }
    const attempt = outcome.attempt;
    if (typeof attempt !== 'number' || !Number.isInteger(attempt) || attempt < 0 || attempt > 0xffffffff) {
      throw invalidArgument('attempt', attempt, 'must be a non-negative integer');
    }
    const status = outcome.status === undefined ? undefined : checkStatus(outcome.status);
    return this.#native.advise(
      attempt,
      status,
      flattenHeaders(outcome.headers),
      bodyText(outcome.body),
      optionalNumber('deadlineInMs', outcome.deadlineInMs),
    );
  }
}
