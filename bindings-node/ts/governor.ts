/** * The governor: reserve before a request leaves (its permits, in
 * `permit.ts`, reconcile after). Routes, classes and permits cross into the
 * addon as numbers; paths and class names are resolved once and cached here.
 */
import { readFileSync } from 'node:fs';

import native, { Metrics, NativeGovernor, QueueMetrics, ProfileArgs, Snapshot } from './native';
import { configJsonOf, invalidArgument, invalidConfig, knownKeys, wellFormed } from './errors';
import { ARGS, count, optionalCount } from './hot';
import { Permit, RoutedPermit } from './permit';
import { countChatTokens, countTokens } from './tokens';
import { dispatcher, EventListener } from './events';
import { granted, keptUnlessAborted, signalOf, waitNumbers, WaitOptions } from './waiting';

/** A resolved set of scopes: a number, valid only with the governor that made it. */
export type Route = number & { readonly __llmgovRoute: unique symbol };

/**
 * A model profile resolved for one consumer by {@link Governor.profile}: a
 * number, valid only with the governor that made it.
 */
export type Profile = number & { readonly __llmgovProfile: unique symbol };

/** The clock a governor reads: the real monotonic one, or a manual one for tests. */
export type ClockKind = 'monotonic' | 'manual';

/** Options of the `Governor.from*` constructors. */
export interface GovernorOptions {
  /** `manual` starts a clock at 0 that moves only with {@link Governor.advance}. */
  clock?: ClockKind;
}

/** What to reserve. Give `route` or `paths`, and the input as a count, a text or messages. */
export interface AcquireRequest {
  /** A route from {@link Governor.route} (the fast way). */
  route?: Route;
  /** Scope paths; resolved to a route once and cached. */
  paths?: readonly string[];
  /** Estimated prompt tokens, cached ones included. */
  inputTokens?: number;
  /** The prompt as text, counted exactly for `model` when `inputTokens` is absent. */
  text?: string;
  /** Chat messages, counted for `model` when `inputTokens` is absent. */
  messages?: readonly unknown[];
  /** Tool definitions sent with `messages`. */
  tools?: readonly unknown[];
  /** The model, for counting `text` or `messages` (gpt-4o's encoding by default). */
  model?: string;
  /** The part of the input expected from the prompt cache. */
  cachedInputTokens?: number;
  /** The request's `max_tokens`. */
  maxOutputTokens?: number;
  /** The output expected, reserved where limits reserve the expected output. */
  expectedOutputTokens?: number;
  /** A traffic class name, e.g. `batch` (output lengths are learned per class). */
  klass?: string;
}

/**
 * What {@link Governor.tryAcquireProfile} reserves: a request, by model
 * profile rather than by route. Give `profile` as a name (with the
 * `consumer` paths charged on every deployment, e.g. `['tenants/acme']`;
 * resolved once and cached) or as a {@link Profile}.
 */
export interface ProfileRequest extends Omit<AcquireRequest, 'route' | 'paths'> {
  /** A profile name from the config's `[profiles.NAME]`, or a resolved {@link Profile}. */
  profile: string | Profile;
  /** The consumer's scope paths, with a profile name (none by default). */
  consumer?: readonly string[];
}

export type { WaitOptions } from './waiting';

/** The fields of each kind of request: any other key is refused (`knownKeys`). */
const REQUEST_FIELDS = new Set([
  'route', 'paths', 'inputTokens', 'text', 'messages', 'tools', 'model',
  'cachedInputTokens', 'maxOutputTokens', 'expectedOutputTokens', 'klass',
]);
/**
 * `REQUEST_FIELDS.has(key)` as a switch, for `tryAcquire`'s scan of every
 * request: a third of the set's cost (about 20 ns a request of three keys
 * against 60, measured). Only a filter: a key it misses is looked up in
 * the set, which is what decides (and names the misspelt field).
 */
function requestField(key: string): boolean {
  switch (key) {
    case 'route': case 'paths': case 'inputTokens': case 'text': case 'messages': case 'tools': case 'model':
    case 'cachedInputTokens': case 'maxOutputTokens': case 'expectedOutputTokens': case 'klass':
      return true;
    default:
      return false;
  }
}
const WAIT_FIELDS = new Set([...REQUEST_FIELDS, 'signal', 'priority', 'deadlineMs']);
const PROFILE_FIELDS = new Set([...REQUEST_FIELDS, 'profile', 'consumer']);
PROFILE_FIELDS.delete('route');
PROFILE_FIELDS.delete('paths');
const PROFILE_WAIT_FIELDS = new Set([...PROFILE_FIELDS, 'signal', 'priority', 'deadlineMs']);

/** What {@link Governor.acquire} waits for: a request, and how to wait. */
export interface WaitRequest extends AcquireRequest, WaitOptions {}

/** What {@link Governor.acquireProfile} waits for: a request by profile, and how to wait. */
export interface ProfileWaitRequest extends ProfileRequest, WaitOptions {}

/**
 * A rate-limit governor: reserves every limit a request is subject to, on
 * every scope it touches, all at once or not at all; reconciles afterwards.
 */
export class Governor {
  readonly #native: NativeGovernor;
  readonly #id: number;
  readonly #routes = new Map<string, Route>();
  readonly #classes = new Map<string, number>();
  readonly #profiles = new Map<string, Profile>();
  readonly #listeners = new Set<EventListener>();

  private constructor(gov: NativeGovernor) {
    this.#native = gov;
    this.#id = gov.id;
  }

  /** A governor from TOML text, or from the path of a TOML file. */
  static fromToml(pathOrText: string, options: GovernorOptions = {}): Governor {
    if (typeof pathOrText !== 'string') throw invalidArgument('toml', pathOrText, 'must be TOML text or a path');
    const text = looksLikePath(pathOrText) ? readConfig(pathOrText) : pathOrText;
    return new Governor(native.NativeGovernor.fromToml(text, manual(options)));
  }

  /** A governor from JSON text or a config object (`{ scopes: { … } }`). */
  static fromJson(textOrConfig: string | object, options: GovernorOptions = {}): Governor {
    if (Array.isArray(textOrConfig)) throw invalidArgument('config', textOrConfig, 'must be JSON text or an object such as { scopes }, not an array');
    const text = typeof textOrConfig === 'string' ? textOrConfig : configJsonOf(textOrConfig);
    if (text === undefined) throw invalidArgument('config', textOrConfig, 'must be JSON text or an object');
    return new Governor(native.NativeGovernor.fromJson(text, manual(options)));
  }

  /** A governor from a shipped preset, e.g. `openai-gpt-4o-tier1`. */
  static fromPreset(name: string, options: GovernorOptions = {}): Governor {
    if (typeof name !== 'string') throw invalidArgument('name', name, 'must be a preset name');
    return new Governor(native.NativeGovernor.fromPreset(name, manual(options)));
  }

  /** Resolves scope paths into a route, once; later calls hit a cache. */
  route(paths: readonly string[]): Route {
    if (!Array.isArray(paths)) throw invalidArgument('paths', paths, 'must be an array of scope paths');
    // One path is its own key; others are JSON, which no two lists share
    // (a join could: ['a', 'b'] and ['a\u0000b']), behind a NUL no single
    // path key starts with.
    const one = paths.length === 1 && typeof paths[0] === 'string' && paths[0].charCodeAt(0) !== 0;
    if (!one) for (const p of paths) if (typeof p !== 'string') throw invalidArgument('paths', p, 'must hold strings');
    const key = one ? paths[0] : `\u0000${JSON.stringify(paths)}`;
    let route = this.#routes.get(key);
    if (route === undefined) {
      for (const p of paths) wellFormed('paths', p);
      route = this.#native.route(paths as string[]) as Route;
      this.#routes.set(key, route);
    }
    return route;
  }

  /**
   * Reserves now, or throws {@link RateLimitedError} (retry after
   * `retryAfterMs`) or {@link NeverFitsError} (never retry as is).
   */
  tryAcquire(request: AcquireRequest): Permit {
    // Everything that may call the addon first; then the buffer, then the call.
    // Every key is checked, whatever else is given: a misspelt
    // `maxOutputToken` would otherwise reserve no output.
    for (const key in request) if (!requestField(key)) knownKeys(request, REQUEST_FIELDS, 'a request');
    const route = this.#routeOf(request);
    const input = inputOf(request);
    const cached = optionalCount('cachedInputTokens', request.cachedInputTokens);
    const maxOutput = optionalCount('maxOutputTokens', request.maxOutputTokens);
    const expected = request.expectedOutputTokens;
    const expectedOutput = expected === undefined ? 0 : count('expectedOutputTokens', expected);
    const klass = request.klass === undefined ? 0 : this.#classOf(request.klass);
    ARGS[0] = this.#id;
    ARGS[1] = route;
    ARGS[2] = input;
    ARGS[3] = cached;
    ARGS[4] = maxOutput;
    ARGS[5] = expected === undefined ? 0 : 1;
    ARGS[6] = expectedOutput;
    ARGS[7] = klass;
    const handle = native.hotTryAcquire();
    if (handle < 0) native.throwLastError();
    return new Permit(this.#native, this.#id, handle, route);
  }

  /**
   * Resolves model profile `name` (a `[profiles.NAME]` of the config) and
   * its fallback chain for a consumer's scope paths, once; later calls hit
   * a cache. Every deployment's route charges the consumer's scopes too.
   */
  profile(name: string, consumer: readonly string[] = []): Profile {
    if (typeof name !== 'string') throw invalidArgument('profile', name, 'must be a profile name');
    if (!Array.isArray(consumer)) throw invalidArgument('consumer', consumer, 'must be an array of scope paths');
    for (const p of consumer) if (typeof p !== 'string') throw invalidArgument('consumer', p, 'must hold strings');
    const key = JSON.stringify([name, ...consumer]); // a join could confuse ['a', 'b'] with ['a\u0000b']
    let profile = this.#profiles.get(key);
    if (profile === undefined) {
      wellFormed('profile', name);
      for (const p of consumer) wellFormed('consumer', p);
      profile = this.#native.profile(name, consumer as string[]) as Profile;
      this.#profiles.set(key, profile);
    }
    return profile;
  }

  /**
   * Reserves now on the profile's deployment with the most normalized
   * headroom (the least, over its provider limits, of available ÷ limit),
   * skipping deployments whose breaker is open and trying the next when one
   * refuses; when all refuse, falls back along the profile's chain if the
   * request's class may (`fallback_allowed`). Past a cost budget's
   * `degrade_at` it goes to the profile's cheaper `degrade_to` (where the
   * class may leave; else, and past `refuse_at`, it is refused on the
   * `cost` dimension). Returns a
   * {@link RoutedPermit} saying which profile and deployment took it, or
   * throws the refusal of the profile asked for: {@link RateLimitedError},
   * {@link CircuitOpenError} (every breaker open) or {@link NeverFitsError}.
   */
  tryAcquireProfile(request: ProfileRequest): RoutedPermit {
    const routed = this.#native.tryAcquireProfile(this.#profileArgs(request, PROFILE_FIELDS));
    return new RoutedPermit(this.#native, this.#id, routed);
  }

  /**
   * Waits until the request can be reserved through its profile, and
   * resolves to a {@link RoutedPermit}: at once where
   * {@link tryAcquireProfile} would admit it; otherwise in the queue of the
   * deployment that should pass first among those its class may use (the
   * fallback chain only where `fallback_allowed`). Deployments past a cost
   * budget's threshold are not waited for, and the thresholds are checked
   * again once admitted: past `degrade_at` it is degraded to the cheaper
   * profile, as a request arriving then would be; past `refuse_at` it
   * rejects with its {@link RateLimitedError} (on `cost`) and holds nothing. Rejects as
   * {@link acquire} does otherwise: {@link NeverFitsError} at once,
   * {@link DeadlineExceededError}, {@link QueueFullError}, or the signal's
   * reason when it is aborted (the request then leaves the queue).
   */
  async acquireProfile(request: ProfileWaitRequest): Promise<RoutedPermit> {
    const signal = signalOf(request);
    signal?.throwIfAborted();
    const args = this.#profileArgs(request, PROFILE_WAIT_FIELDS);
    const wait = waitNumbers(request);
    const routed = await granted(native.acquireProfileStart({ governor: this.#id, ...wait }, args), wait.ticket, signal);
    return keptUnlessAborted(new RoutedPermit(this.#native, this.#id, routed), signal);
  }

  /**
   * Waits until the request can be reserved, in its class's queue (fair
   * across tenants on token cost), and resolves to its permit. Rejects with
   * {@link NeverFitsError} at once, {@link DeadlineExceededError} when the
   * deadline passes (or is sure to), {@link QueueFullError}, or the signal's
   * reason when it is aborted (the request then leaves the queue).
   */
  async acquire(request: WaitRequest): Promise<Permit> {
    knownKeys(request, WAIT_FIELDS, 'a request');
    const signal = signalOf(request);
    signal?.throwIfAborted();
    const route = this.#routeOf(request);
    const wait = waitNumbers(request);
    const expected = request.expectedOutputTokens;
    const started = native.acquireStart({
      governor: this.#id,
      ...wait,
      route,
      inputTokens: inputOf(request),
      cachedInputTokens: optionalCount('cachedInputTokens', request.cachedInputTokens),
      maxOutputTokens: optionalCount('maxOutputTokens', request.maxOutputTokens),
      expectedOutputTokens: expected === undefined ? undefined : count('expectedOutputTokens', expected),
      classNumber: request.klass === undefined ? 0 : this.#classOf(request.klass),
    });
    const handle = await granted(started, wait.ticket, signal);
    return keptUnlessAborted(new Permit(this.#native, this.#id, handle, route), signal);
  }

  /**
   * Runs `body` with a permit, as Python's `with gov.reserve(...)` does:
   * waits for it, cancels it if `body` throws (the request was not made, or
   * its answer is lost), and settles it as estimated if `body` left it
   * pending. Resolves to what `body` returned.
   *
   * ```js
   * const answer = await gov.reserve({ route, messages, maxOutputTokens: 500 }, async (permit) => {
   *   const answer = await openai.chat.completions.create({ ... });
   *   permit.settle(answer.usage);
   *   return answer;
   * });
   * ```
   */
  async reserve<T>(request: WaitRequest, body: (permit: Permit) => T | Promise<T>): Promise<T> {
    if (typeof body !== 'function') throw invalidArgument('body', body, 'must be a function of the permit');
    const permit = await this.acquire(request);
    let result: T;
    try {
      result = await body(permit);
    } catch (error) {
      if (permit.state === 'pending') permit.cancel();
      throw error;
    }
    const held = permit.state === 'pending' ? permit.info() : null;
    if (held) permit.settle({ inputTokens: held.inputTokens, cachedInputTokens: held.cachedInputTokens, outputTokens: held.outputTokens });
    return result;
  }

  /** Every traffic class's waiting queue: depth, oldest wait, admitted and refused counts. */
  queueMetrics(): QueueMetrics {
    return this.#native.queueMetrics();
  }

  /** Every scope and counter now. */
  snapshot(): Snapshot {
    return this.#native.snapshot();
  }

  /**
   * Everything observable now in one object: `snapshot` (as
   * {@link Governor.snapshot}), `queues` (as {@link Governor.queueMetrics}),
   * `refusals` by dimension and `gatewayDecision`, `estimateErrors` per
   * provider route and side, and `retryAmplification`. The Prometheus text
   * is drawn from the same figures.
   */
  metrics(): Metrics {
    return this.#native.metrics();
  }

  /**
   * {@link Governor.metrics} as the core's JSON text (snake_case, the same
   * from every language): serve it, or write it to a file, for
   * `llmgov top FILE_OR_URL`.
   */
  metricsJson(): string {
    return this.#native.metricsJson();
  }

  /**
   * Every limit, counter, breaker and queue now, in the Prometheus text
   * format (OpenMetrics: `llmgov_limit`, `llmgov_limit_effective`,
   * `llmgov_in_use`, `llmgov_utilisation`, `llmgov_admitted_total`,
   * `llmgov_breaker`, …), to serve on a `/metrics` endpoint.
   */
  prometheus(): string {
    return this.#native.prometheus();
  }

  /**
   * Calls `listener` with every event from now on: each request llmgov
   * refuses (`denied`), each provider refusal reported (`provider_rejected`)
   * and each breaker change (`breaker_changed`), as a plain object. Events
   * arrive asynchronously, in order, on this thread, after the call that
   * caused them returned. Returns the function that removes the listener.
   *
   * The listeners never keep the process alive; one that throws is reported
   * as a process warning, never crashes it (see `GovernorEvent`).
   */
  onEvent(listener: EventListener): () => void {
    if (typeof listener !== 'function') throw invalidArgument('listener', listener, 'must be a function of the event');
    if (this.#listeners.size === 0) this.#native.setEventListener(dispatcher(this.#listeners));
    this.#listeners.add(listener);
    return () => {
      if (this.#listeners.delete(listener) && this.#listeners.size === 0) this.#native.setEventListener(null);
    };
  }

  /** Events dropped because more than 4096 were waiting for this thread. */
  droppedEvents(): number {
    return this.#native.droppedEvents();
  }

  /** Moves a manual clock forward by `ms` milliseconds. */
  advance(ms: number): void {
    this.#native.advance(count('ms', ms));
  }

  /** The governor clock's reading, in milliseconds. */
  nowMs(): number {
    return this.#native.nowMs();
  }

  /** Permits handed out and neither reconciled nor expired and swept. */
  livePermits(): number {
    return this.#native.livePermits();
  }

  #routeOf(request: AcquireRequest): Route {
    if (request === null || typeof request !== 'object') {
      throw invalidArgument('request', request, 'must be an object such as { paths, inputTokens }');
    }
    const route = request.route;
    if (typeof route === 'number') return route;
    if (route !== undefined) throw invalidArgument('route', route, 'must be a route from gov.route(paths)');
    if (request.paths === undefined) throw invalidArgument('paths', undefined, 'give `route` or `paths`');
    return this.route(request.paths);
  }

  /** The addon's arguments for a request by profile. */
  #profileArgs(request: ProfileRequest, fields: ReadonlySet<string>): ProfileArgs {
    if (request === null || typeof request !== 'object') {
      throw invalidArgument('request', request, "must be an object such as { profile: 'gpt-4o', inputTokens }");
    }
    knownKeys(request, fields, 'a request by profile');
    const expected = request.expectedOutputTokens;
    return {
      profile: this.#profileOf(request),
      inputTokens: inputOf(request),
      cachedInputTokens: optionalCount('cachedInputTokens', request.cachedInputTokens),
      maxOutputTokens: optionalCount('maxOutputTokens', request.maxOutputTokens),
      expectedOutputTokens: expected === undefined ? undefined : count('expectedOutputTokens', expected),
      classNumber: request.klass === undefined ? 0 : this.#classOf(request.klass),
    };
  }

  #profileOf(request: ProfileRequest): Profile {
    const { profile, consumer } = request;
    if (typeof profile === 'number') {
      if (consumer !== undefined) throw invalidArgument('consumer', consumer, 'a resolved profile already has its consumer');
      return profile;
    }
    if (typeof profile !== 'string') throw invalidArgument('profile', profile, 'must be a profile name or gov.profile(...)');
    return this.profile(profile, consumer);
  }

  #classOf(name: unknown): number {
    if (typeof name !== 'string') throw invalidArgument('klass', name, 'must be a class name');
    let id = this.#classes.get(name);
    if (id === undefined) {
      id = this.#native.classId(wellFormed('klass', name));
      this.#classes.set(name, id);
    }
    return id;
  }
}

/**
 * The input the request gives: a count, a text or messages, at most one
 * (none is 0). Its keys are the caller's to check first (`knownKeys`):
 * `inputToken: 5000` would otherwise reserve no input.
 * Shared with `RedisGovernor`.
 */
export function inputOf(request: Omit<AcquireRequest, 'route' | 'paths'>): number {
  const { inputTokens, text, messages, tools } = request;
  // Tools count as part of messages; beside a count or a text they would be left out.
  if (tools !== undefined && tools !== null && messages === undefined) {
    throw invalidArgument('tools', tools, 'count only with messages: give messages, or count the tools into inputTokens');
  }
  if (inputTokens !== undefined) {
    if (text !== undefined || messages !== undefined) throw twoInputs(request);
    return count('inputTokens', inputTokens);
  }
  if (text !== undefined) {
    if (messages !== undefined) throw twoInputs(request);
    return countTokens(text, request.model);
  }
  if (messages !== undefined) return countChatTokens(messages, request.model ?? 'gpt-4o', request.tools);
  return 0;
}

/** A request that gives its input twice: which to count is the caller's to say. */
function twoInputs(request: Omit<AcquireRequest, 'route' | 'paths'>): Error {
  const given = (['inputTokens', 'text', 'messages'] as const).filter((k) => request[k] !== undefined);
  return invalidArgument(given[1], request[given[1]], `give one of inputTokens, text and messages, not ${given.join(' and ')}`);
}

const GOVERNOR_OPTIONS = new Set(['clock']);

/** Whether `options` ask for a manual clock; an `InvalidRequestError` naming a bad option. */
export function manual(options: GovernorOptions): boolean {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw invalidArgument('options', options, "must be an object of options, e.g. { clock: 'manual' }");
  }
  knownKeys(options, GOVERNOR_OPTIONS, 'governor options');
  const clock = options.clock ?? 'monotonic';
  if (clock !== 'manual' && clock !== 'monotonic') throw invalidArgument('clock', clock, "must be 'monotonic' or 'manual'");
  return clock === 'manual';
}

/** The text of the config file at `path`; an `InvalidConfigError` naming `path` if it cannot be read. */
export function readConfig(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw invalidConfig('path', path, `cannot be read (one line with no TOML syntax is taken as a path): ${(error as Error).message}`);
  }
}

/** One line, no TOML syntax: a path (Python's `from_toml(path_or_text)` reads it the same way). */
export function looksLikePath(text: string): boolean {
  return !/[\n=[]/.test(text);
}
