/**
 * `RedisGovernor`: the scopes named under `[redis.scopes]` shared by every
 * process through Redis (the `llmgov-redis` crate, as in Rust and Python),
 * the others local to the process. Every call that may reach Redis runs on
 * libuv's thread pool and returns a Promise: the event loop never waits on
 * the network.
 */
import native from './native';
import { configJsonOf, invalidArgument, knownKeys, wellFormed } from './errors';
import { count, optionalCount } from './hot';
import { AcquireRequest, GovernorOptions, inputOf, looksLikePath, manual, readConfig } from './governor';
import { signalOf } from './waiting';
import { AnyUsage, usageCounts } from './usage';
import type { Classification, Metrics, Snapshot } from './native';
import { APIErrorLike, ResponseLike, reportAnswer } from './permit';
import type { HeadersLike } from './headers';
import type { BodyLike } from './feedback';

type NativeRedisGovernor = InstanceType<typeof native.NativeRedisGovernor>;
type NativeRedisPermit = InstanceType<typeof native.NativeRedisPermit>;

/** A request's scopes split into local and shared parts, from {@link RedisGovernor.route}. */
export type RedisRoute = InstanceType<typeof native.NativeRedisRoute>;

/**
 * What {@link RedisGovernor.tryAcquire} reserves: the local request's
 * fields, less those shared scopes cannot honour (`expectedOutputTokens`,
 * `klass`; they are refused by name). Give `route` or `paths`, and the
 * input as a count, a text or messages.
 */
export interface RedisAcquireRequest extends Omit<AcquireRequest, 'route' | 'expectedOutputTokens' | 'klass'> {
  /** A route from {@link RedisGovernor.route}. */
  route?: RedisRoute;
}

/** What {@link RedisGovernor.acquire} waits for: a request, and how long. */
export interface RedisWaitRequest extends RedisAcquireRequest {
  /** Aborting it stops the wait, with nothing held, and rejects with its reason. */
  signal?: AbortSignal;
  /** The longest to wait, in ms on the governor's clock (none: until admitted). */
  deadlineMs?: number;
}

/** The link to Redis: what {@link RedisGovernor.health} reads. */
export type RedisHealth = ReturnType<NativeRedisGovernor['health']>;

/** What a permit charges: the estimate until reconciled, then the actual usage (zero if cancelled). */
export interface RedisCharge {
  inputTokens: number;
  cachedInputTokens: number;
  outputTokens: number;
}

/** Where a Redis permit stands. */
export type RedisPermitState = 'pending' | 'settled' | 'cancelled' | 'expired';

const REQUEST_FIELDS = new Set([
  'route', 'paths', 'inputTokens', 'text', 'messages', 'tools', 'model', 'cachedInputTokens', 'maxOutputTokens',
]);
const WAIT_FIELDS = new Set([...REQUEST_FIELDS, 'signal', 'deadlineMs']);
/** The local governor's fields that shared scopes cannot honour, refused by name. */
const LOCAL_ONLY = ['expectedOutputTokens', 'klass', 'priority'] as const;

/**
 * A governor whose `[redis.scopes]` are enforced across processes through
 * Redis; every other scope stays local to the process. While Redis is
 * unreachable the shared scopes admit from a safe local share (each limit
 * ÷ `expected_processes`); {@link RedisGovernor.health} says so.
 */
export class RedisGovernor {
  readonly #native: NativeRedisGovernor;
  readonly #routes = new Map<string, RedisRoute>();

  private constructor(gov: NativeRedisGovernor) {
    this.#native = gov;
  }

  /**
   * A governor from TOML text, or from the path of a TOML file: the
   * core's sections plus `[redis]` (a missing `redis.url` is read from
   * `LLMGOV_REDIS_URL`). Building opens no connection.
   */
  static fromToml(pathOrText: string, options: GovernorOptions = {}): RedisGovernor {
    if (typeof pathOrText !== 'string') throw invalidArgument('toml', pathOrText, 'must be TOML text or a path');
    const text = looksLikePath(pathOrText) ? readConfig(pathOrText) : pathOrText;
    return new RedisGovernor(native.NativeRedisGovernor.fromToml(text, manual(options)));
  }

  /** A governor from JSON text or a config object: the TOML's form, the `[redis]` section under `redis`. */
  static fromJson(textOrConfig: string | object, options: GovernorOptions = {}): RedisGovernor {
    if (Array.isArray(textOrConfig) || textOrConfig === null || (typeof textOrConfig !== 'string' && typeof textOrConfig !== 'object')) {
      throw invalidArgument('config', textOrConfig, 'must be JSON text or an object such as { scopes, redis }');
    }
    const text = typeof textOrConfig === 'string' ? textOrConfig : configJsonOf(textOrConfig);
    return new RedisGovernor(native.NativeRedisGovernor.fromJson(text, manual(options)));
  }

  /** The prefix of its Redis keys (`redis.prefix`). */
  get prefix(): string {
    return this.#native.prefix;
  }

  /** Resolves scope paths into local and shared parts, once; later calls hit a cache. */
  route(paths: readonly string[]): RedisRoute {
    if (!Array.isArray(paths)) throw invalidArgument('paths', paths, 'must be an array of scope paths');
    for (const p of paths) if (typeof p !== 'string') throw invalidArgument('paths', p, 'must hold strings');
    const key = JSON.stringify(paths);
    let route = this.#routes.get(key);
    if (route === undefined) {
      for (const p of paths) wellFormed('paths', p);
      route = this.#native.route(paths as string[]);
      this.#routes.set(key, route);
    }
    return route;
  }

  /**
   * Reserves the estimate on every scope of the route, local and shared,
   * or nothing (one Redis script per shared scope, on the thread pool).
   * Resolves to a {@link RedisPermit}; rejects with
   * {@link RateLimitedError} (retry after `retryAfterMs`) or
   * {@link NeverFitsError} (never retry as is).
   */
  async tryAcquire(request: RedisAcquireRequest): Promise<RedisPermit> {
    const [route, input, cached, maxOutput] = this.#estimate(request, REQUEST_FIELDS);
    return new RedisPermit(await this.#native.tryAcquire(route, input, cached, maxOutput));
  }

  /**
   * {@link tryAcquire}, waiting while a limit refuses: sleeps (on a timer)
   * until the refusing limit could admit the request (Redis's GCRA says
   * when, in either mode; concurrency slots are polled, 2 to 50 ms)
   * and tries again. Rejects with {@link DeadlineExceededError} at once
   * when the predicted wait is past `deadlineMs`, or when it comes;
   * {@link NeverFitsError} at once; the signal's reason when it is aborted,
   * holding nothing. Waiters are not queued across processes: whichever
   * tries first after capacity returns takes it.
   */
  async acquire(request: RedisWaitRequest): Promise<RedisPermit> {
    const signal = signalOf(request);
    signal?.throwIfAborted();
    const [route, input, cached, maxOutput] = this.#estimate(request, WAIT_FIELDS);
    const deadline = request.deadlineMs;
    if (deadline !== undefined && typeof deadline !== 'number') throw invalidArgument('deadlineMs', deadline, 'must be a number');
    const attempt = this.#native.attempt(route, input, cached, maxOutput, deadline);
    for (;;) {
      const outcome = await attempt.step();
      if (typeof outcome !== 'number') {
        const permit = new RedisPermit(outcome);
        if (signal?.aborted) {
          // Granted as the caller left: given back, not held until it expires.
          await permit.cancel();
          throw signal.reason;
        }
        return permit;
      }
      await pause(outcome, signal);
    }
  }

  /**
   * The link to Redis, read without I/O: `degraded`, `fallbackAdmissions`,
   * `redisErrors`, `recoveries`, `stateResets`, `redisCalls`, `lastError`.
   */
  health(): RedisHealth {
    return this.#native.health();
  }

  /** Gives every lease's unused part back to Redis: call it before the process exits (leased mode). */
  returnLeases(): Promise<void> {
    return this.#native.returnLeases();
  }

  /** Refreshes every concurrency slot this process holds (a background thread also does, every third of `slot_ttl`). */
  heartbeat(): Promise<void> {
    return this.#native.heartbeat();
  }

  /** The local scopes (those not shared) and their counters. */
  snapshot(): Snapshot {
    return this.#native.snapshot();
  }

  /** The local engine's metrics (refusals by shared scopes are Redis's and are not counted here). */
  metrics(): Metrics {
    return this.#native.metrics();
  }

  /** Moves a manual clock forward by `ms` milliseconds (local limits, permit expiry; Redis keeps its own time). */
  advance(ms: number): void {
    this.#native.advance(count('ms', ms));
  }

  /** The governor clock's reading, in milliseconds. */
  nowMs(): number {
    return this.#native.nowMs();
  }

  /** The route and the counts a request reserves, each checked. */
  #estimate(request: RedisAcquireRequest, fields: ReadonlySet<string>): [RedisRoute, number, number, number] {
    if (request === null || typeof request !== 'object') {
      throw invalidArgument('request', request, 'must be an object such as { paths, inputTokens }');
    }
    for (const field of LOCAL_ONLY) {
      const value = (request as Record<string, unknown>)[field];
      if (value !== undefined) {
        throw invalidArgument(field, value, 'is not supported by RedisGovernor: shared scopes reserve maxOutputTokens and have no traffic classes');
      }
    }
    knownKeys(request, fields, 'a Redis request');
    return [
      this.#routeOf(request),
      inputOf(request),
      optionalCount('cachedInputTokens', request.cachedInputTokens),
      optionalCount('maxOutputTokens', request.maxOutputTokens),
    ];
  }

  #routeOf(request: RedisAcquireRequest): RedisRoute {
    const route = request.route;
    if (route instanceof native.NativeRedisRoute) return route;
    if (route !== undefined) throw invalidArgument('route', route, 'must be a route from redisGov.route(paths)');
    if (request.paths === undefined) throw invalidArgument('paths', undefined, 'give `route` or `paths`');
    return this.route(request.paths);
  }
}

/**
 * A granted reservation of a {@link RedisGovernor}. Settle it with the
 * actual usage (what was over-reserved goes back to Redis, what was under
 * is charged), or cancel it if the request was never sent; once.
 */
export class RedisPermit {
  readonly #native: NativeRedisPermit;
  #state: RedisPermitState = 'pending';
  #charged: RedisCharge;
  /** Output reported by {@link addOutput}. */
  #streamed = 0;

  /** @internal Made by {@link RedisGovernor.tryAcquire} and {@link RedisGovernor.acquire}. */
  constructor(permit: NativeRedisPermit) {
    this.#native = permit;
    this.#charged = permit.estimate;
  }

  /** Where the permit stands. */
  get state(): RedisPermitState {
    return this.#state;
  }

  /** What it charges: the estimate (`maxOutputTokens` as the output, or what streamed past it) until reconciled, then the actual usage. */
  get charged(): RedisCharge {
    return { ...this.#charged };
  }

  /** Whether the shared scopes admitted it from the safe local share because Redis was unreachable. */
  get fromFallback(): boolean {
    return this.#native.fromFallback;
  }

  /**
   * Reconciles with actual usage: `{ inputTokens, outputTokens, cachedInputTokens }`
   * or an OpenAI or Anthropic `usage` object, as `Permit.settle` takes them;
   * without one, as estimated. Rejects with {@link AlreadyReconciledError}
   * when settled or cancelled before.
   */
  async settle(usage?: AnyUsage): Promise<void> {
    const [input, cached, output] = usageCounts(usage, () => this.#estimateCounts());
    await this.#finish(() => this.#native.settle(input, cached, output), 'settled');
    this.#charged = { inputTokens: input, cachedInputTokens: cached, outputTokens: output };
  }

  /**
   * Feeds the provider's answer into the route's local scopes (a 429 holds
   * the local provider scope it names empty until the retry-after; AIMD
   * and the breaker learn) and returns its classification; settle or
   * cancel as usual afterwards. A 429, or a circuit breaker the answer
   * opens, also holds the route's shared provider scopes empty in Redis
   * for every process (on the thread pool:
   * the classification returns at once).
   * Takes what `Permit.report` takes: `(status, headers, body)`, an SDK
   * `APIError`, or a fetch `Response` (then a Promise).
   */
  report(status: number, headers?: HeadersLike | null, body?: BodyLike): Classification;
  report(error: APIErrorLike): Classification;
  report(response: ResponseLike): Promise<Classification>;
  report(
    what: number | APIErrorLike | ResponseLike,
    headers?: HeadersLike | null,
    body?: BodyLike,
  ): Classification | Promise<Classification> {
    return reportAnswer((status, flat, text) => this.#native.report(status, flat, text), what, headers, body);
  }

  /**
   * Charges `tokens` more streamed output as it arrives, on the route's
   * local scopes (beyond their reservation only); the shared scopes
   * reserved `maxOutputTokens`, and are charged any more at settle. No
   * Redis call. Throws {@link AlreadyReconciledError} once settled or
   * cancelled (or while that runs).
   */
  addOutput(tokens: number): void {
    this.#native.addOutput(tokens);
    this.#streamed += tokens;
    if (this.#streamed > this.#charged.outputTokens) this.#charged = { ...this.#charged, outputTokens: this.#streamed };
  }

  /** Gives the whole reservation back: the request was never sent. */
  async cancel(): Promise<void> {
    await this.#finish(() => this.#native.cancel(), 'cancelled');
    this.#charged = { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };
  }

  #estimateCounts(): [number, number, number] {
    const { inputTokens, cachedInputTokens, outputTokens } = this.#charged;
    return [inputTokens, cachedInputTokens, outputTokens];
  }

  async #finish(op: () => Promise<void>, state: RedisPermitState): Promise<void> {
    try {
      await op();
      this.#state = state;
    } catch (e) {
      if ((e as { code?: string }).code === 'permit_expired') this.#state = 'expired';
      throw e;
    }
  }
}

/** Sleeps `ms`, or rejects with the signal's reason as soon as it is aborted. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const aborted = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }, ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });
}
