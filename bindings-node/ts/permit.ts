/**
 * Permits: a granted reservation, reconciled once with the actual usage, and
 * the provider's answer fed back through it.
 */
import native, { Classification, NativeGovernor, PermitInfo, ProfileGrant } from './native';
import { invalidArgument } from './errors';
import { AnyUsage, usageCounts } from './usage';
import { flattenHeaders, HeadersLike } from './headers';
import { BodyLike, bodyText, checkStatus } from './feedback';
import { ARGS, count } from './hot';
import type { Route } from './governor';

/** Where a permit stands. */
export type PermitState = 'pending' | 'settled' | 'cancelled' | 'expired';

/** An openai-node `APIError` (or any error with a status, headers and a body). */
export interface APIErrorLike {
  status: number | undefined;
  headers?: HeadersLike | null;
  error?: unknown;
}

/** A fetch `Response`, as far as `report` reads it. */
export interface ResponseLike {
  status: number;
  headers: HeadersLike;
  clone(): { text(): Promise<string> };
  /** Whether the body was read already (a fetch `Response` says). */
  bodyUsed?: boolean;
  body?: { locked: boolean } | null;
}

const isResponse = (x: unknown): x is ResponseLike =>
  typeof x === 'object' && x !== null && typeof (x as ResponseLike).clone === 'function' && 'status' in x;

function isEventStream(headers: HeadersLike): boolean {
  const flat = flattenHeaders(headers);
  for (let i = 0; i < flat.length; i += 2) {
    if (flat[i].toLowerCase() === 'content-type' && flat[i + 1].includes('text/event-stream')) return true;
  }
  return false;
}

/**
 * Reads `report`'s arguments (a status with headers and body, an SDK
 * `APIError`, or a fetch `Response`) and hands the answer to `send`, with
 * the headers flattened: `Permit.report` and `RedisPermit.report`.
 * @internal
 */
export function reportAnswer(
  send: (status: number, headers: string[], body: string) => Classification,
  what: number | APIErrorLike | ResponseLike,
  headers?: HeadersLike | null,
  body?: BodyLike,
): Classification | Promise<Classification> {
  const report = (status: number, h: HeadersLike | null | undefined, b: BodyLike) =>
    send(checkStatus(status), flattenHeaders(h), bodyText(b));
  if (typeof what === 'number') return report(what, headers, body);
  if (isResponse(what)) {
    // A body read already cannot be cloned, and a stream's clone would
    // resolve only when the stream ends: the status and headers carry
    // what a success says about limits.
    if (what.bodyUsed || what.body?.locked || isEventStream(what.headers)) {
      return new Promise((resolve) => resolve(report(what.status, what.headers, '')));
    }
    return what.clone().text().then((text) => report(what.status, what.headers, text));
  }
  if (typeof what === 'object' && what !== null && 'status' in what) {
    const error = what as APIErrorLike;
    const errorBody = error.error === undefined ? undefined : { error: error.error };
    return report(checkStatus(error.status), error.headers, errorBody);
  }
  throw invalidArgument('response', what, 'must be a status, a fetch Response or an SDK APIError');
}

/**
 * A granted reservation. Settle it with the actual usage, or cancel it if
 * the request was never sent; left alone, it expires after the permit TTL,
 * charged as estimated, its concurrency slot freed. It reconciles once.
 */
export class Permit {
  /** Keeps the governor alive while the permit is. */
  readonly #gov: NativeGovernor;
  readonly #id: number;
  readonly #handle: number;
  #state: PermitState = 'pending';
  /** The route it is charged on. */
  readonly route: Route;

  /** @internal Made by {@link Governor.tryAcquire} and {@link Governor.acquire}. */
  constructor(gov: NativeGovernor, id: number, handle: number, route: Route) {
    this.#gov = gov;
    this.#id = id;
    this.#handle = handle;
    this.route = route;
  }

  /** Where the permit stands. */
  get state(): PermitState {
    return this.#state;
  }

  /** What it holds now; `null` once reconciled. */
  info(): PermitInfo | null {
    return this.#state === 'pending' ? this.#gov.permitInfo(this.#handle) : null;
  }

  /**
   * Reconciles with actual usage: `{ inputTokens, outputTokens, cachedInputTokens }`,
   * or an OpenAI or Anthropic `usage` object; without one, as estimated
   * (and `{ outputTokens }` alone keeps the input estimate). Refunds what
   * was over-reserved, charges any overage (into debt if need be).
   */
  settle(usage?: AnyUsage): void {
    if (this.#state !== 'pending') native.NativeGovernor.finished(this.#state);
    const [input, cached, output] = usageCounts(usage, () => {
      const held = this.#gov.permitInfo(this.#handle);
      // None: the addon no longer has it, and the settle below says why.
      return held ? [held.inputTokens, held.cachedInputTokens, held.outputTokens] : [0, 0, 0];
    });
    ARGS[0] = this.#id;
    ARGS[1] = this.#handle;
    ARGS[2] = input;
    ARGS[3] = cached;
    ARGS[4] = output;
    this.#finish(native.hotSettle, 'settled');
  }

  /** Refunds everything: the request was never sent. */
  cancel(): void {
    if (this.#state !== 'pending') native.NativeGovernor.finished(this.#state);
    ARGS[0] = this.#id;
    ARGS[1] = this.#handle;
    this.#finish(native.hotCancel, 'cancelled');
  }

  /** Charges `tokens` more streamed output (beyond the reservation it costs more). */
  addOutput(tokens: number): void {
    if (this.#state !== 'pending') native.NativeGovernor.finished(this.#state);
    ARGS[0] = this.#id;
    ARGS[1] = this.#handle;
    ARGS[2] = count('tokens', tokens);
    try {
      if (native.hotAddOutput() < 0) native.throwLastError();
    } catch (e) {
      if ((e as { code?: string }).code === 'permit_expired') this.#state = 'expired';
      throw e;
    }
  }

  /**
   * Feeds the provider's answer back into the route's provider scopes (a
   * 429 holds the bucket it names empty until the retry-after; `remaining`
   * headers lower buckets) and returns its classification. Settle or cancel
   * the permit as usual afterwards.
   *
   * - `report(status, headers, body)`;
   * - `report(apiError)`: an openai-node or Anthropic SDK `APIError`;
   * - `report(response)`: a fetch `Response` (its body is read from a clone,
   *   so a Promise is returned; a body already read, or a stream's, is not
   *   read: the status and headers are reported alone).
   */
  report(status: number, headers?: HeadersLike | null, body?: BodyLike): Classification;
  report(error: APIErrorLike): Classification;
  report(response: ResponseLike): Promise<Classification>;
  report(
    what: number | APIErrorLike | ResponseLike,
    headers?: HeadersLike | null,
    body?: BodyLike,
  ): Classification | Promise<Classification> {
    return reportAnswer(
      (status, flat, text) => this.#gov.report(this.#handle, this.route, status, flat, text),
      what,
      headers,
      body,
    );
  }

  #finish(op: () => number, state: PermitState): void {
    try {
      if (op() < 0) native.throwLastError();
      this.#state = state;
    } catch (e) {
      if ((e as { code?: string }).code === 'permit_expired') this.#state = 'expired';
      throw e;
    }
  }
}

/**
 * A permit granted through a model profile: a {@link Permit} on the chosen
 * deployment's route, saying where it went.
 */
export class RoutedPermit extends Permit {
  /** The profile that served it: the one asked for, or a fallback's. */
  readonly profile: string;
  /** The chosen deployment's scope path, e.g. `azure/eastus`. */
  readonly deployment: string;
  /** Whether it left the profile asked for because every deployment refused (only where its class may). */
  readonly fellBack: boolean;
  /**
   * Whether it left the profile asked for because a cost budget passed the
   * profile's `budget.degrade_at` (served by its cheaper `degrade_to`).
   */
  readonly degraded: boolean;

  /** @internal Made by {@link Governor.tryAcquireProfile} and {@link Governor.acquireProfile}. */
  constructor(gov: NativeGovernor, id: number, routed: ProfileGrant) {
    super(gov, id, routed.handle, routed.route as Route);
    this.profile = routed.profile;
    this.deployment = routed.deployment;
    this.fellBack = routed.fellBack;
    this.degraded = routed.degraded;
  }
}
