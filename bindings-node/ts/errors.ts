/**
 * The exception tree. Every error llmgov throws is an {@link LlmgovError}
 * with a stable `code` (the core's `Error::code()`, the same in every
 * language) and the fields of its kind. The addon's `errors.rs` maps the
 * core's errors and sets the fields; this file only declares the classes.
 */
import native from './native';

/** Base of every llmgov error. */
export class LlmgovError extends Error {
  /** The stable machine-readable code, e.g. `rate_limited`. */
  readonly code: string;

  constructor(message: string, code = 'llmgov_error') {
    super(message);
    this.code = code;
  }

  override get name(): string {
    return this.constructor.name;
  }
}

/** The request fits the limit in principle but not now; nothing was reserved. */
export class RateLimitedError extends LlmgovError {
  /** Path of the scope whose limit refused. */
  declare readonly scope: string;
  /** Dimension of the limit that refused. */
  declare readonly dimension: string;
  /**
   * Milliseconds until this limit could admit the request (rounded up), or
   * `null` when it waits on a release (concurrency).
   */
  declare readonly retryAfterMs: number | null;
  /** `rejected_locally`: llmgov refused it; the provider never saw it. */
  declare readonly gatewayDecision: 'rejected_locally';
}

/**
 * A provider scope's circuit breaker is open after consecutive failures;
 * nothing was reserved. After `retryAfterMs` one request goes through as a
 * probe, and its success closes the breaker.
 */
export class CircuitOpenError extends LlmgovError {
  /** The provider scope whose breaker is open. */
  declare readonly scope: string;
  /** Milliseconds until the breaker lets the next probe through (rounded up). */
  declare readonly retryAfterMs: number;
}

/** The request costs more than a limit can ever hold: never retry it as is. */
export class NeverFitsError extends LlmgovError {
  /** Path of the scope whose limit is too small. */
  declare readonly scope: string;
  /** Dimension of that limit. */
  declare readonly dimension: string;
  /** What the request would cost on it. */
  declare readonly cost: number;
  /** The most that limit can ever hold at once. */
  declare readonly burst: number;
}

/** A configuration field is wrong; nothing was built. */
export class InvalidConfigError extends LlmgovError {
  /** Dotted path of the field, e.g. `scopes.openai/gpt-4o.limits[0].amount`. */
  declare readonly field: string;
  /** The offending value as written. */
  declare readonly value: string;
  /** What is wrong with it. */
  declare readonly reason: string;
}

/** A scope path is malformed. */
export class InvalidPathError extends LlmgovError {
  /** The path as given. */
  declare readonly path: string;
  /** What is wrong with it. */
  declare readonly reason: string;
}

/** No configured scope or template matches the path or any of its ancestors. */
export class UnknownScopeError extends LlmgovError {
  /** The path as given. */
  declare readonly path: string;
}

/** No preset has this name. */
export class UnknownPresetError extends LlmgovError {
  /** The preset name asked for. */
  declare readonly preset: string;
  /** The shipped presets. */
  declare readonly known: string[];
}

/** A request field or argument is out of range or of the wrong type. */
export class InvalidRequestError extends LlmgovError {
  /** The field, as the caller wrote it (camelCase), e.g. `inputTokens`. */
  declare readonly field: string;
  /** The offending value. */
  declare readonly value: string;
  /** What is wrong with it. */
  declare readonly reason: string;
}

/** The permit was already settled or cancelled. */
export class PermitFinishedError extends LlmgovError {
  /** `settled` or `cancelled`. */
  declare readonly state: string;
}

/** The permit outlived its TTL: it was charged as estimated. */
export class PermitExpiredError extends LlmgovError {}

/** A waiting request was not admitted within its deadline; nothing was reserved. */
export class DeadlineExceededError extends LlmgovError {
  /** How long it waited, in ms (0 when refused at once: its predicted wait was longer). */
  declare readonly waitedMs: number;
  /** The predicted wait from now, if known: retrying sooner is futile. */
  declare readonly retryAfterMs: number | null;
}

/** A Redis permit was already settled or cancelled (`RedisPermit`); nothing changed. */
export class AlreadyReconciledError extends LlmgovError {}

/** The request's traffic class already has as many waiters as its queue allows. */
export class QueueFullError extends LlmgovError {
  /** The class's name (empty for the default class). */
  declare readonly klass: string;
  /** Its queue bound. */
  declare readonly bound: number;
  /** The predicted time until the queue drains below its bound, if known. */
  declare readonly retryAfterMs: number | null;
}

const CLASSES: Record<string, new (message: string, code: string) => LlmgovError> = {
  rate_limited: RateLimitedError,
  never_fits: NeverFitsError,
  circuit_open: CircuitOpenError,
  invalid_config: InvalidConfigError,
  invalid_path: InvalidPathError,
  unknown_scope: UnknownScopeError,
  unknown_preset: UnknownPresetError,
  invalid_request: InvalidRequestError,
  permit_finished: PermitFinishedError,
  permit_expired: PermitExpiredError,
  deadline_exceeded: DeadlineExceededError,
  queue_full: QueueFullError,
  already_reconciled: AlreadyReconciledError,
};

native.registerErrorFactory((code, message) => new (CLASSES[code] ?? LlmgovError)(message, code));

/**
 * A wrong type found before the addon is called (a string where a count
 * belongs): the same `InvalidRequestError` the addon throws for a bad value.
 */
export function invalidArgument(field: string, value: unknown, reason: string): InvalidRequestError {
  const shown = shownValue(value);
  const error = new InvalidRequestError(`invalid request: \`${field}\` = \`${shown}\`: ${reason}`, 'invalid_request');
  Object.assign(error, { field, value: shown, reason });
  return error;
}

/** Why a string holding a lone UTF-16 surrogate is refused (Python's wording). */
export const LONE_SURROGATE = 'is not valid Unicode (lone surrogates)';

/** Whether `value` holds no lone UTF-16 surrogate. */
export function isWellFormed(value: string): boolean {
  // `isWellFormed` is Node 20's, newer than the ES2022 library typed here.
  return (value as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/**
 * `value`, refused if it holds a lone UTF-16 surrogate: the addon reads
 * strings as UTF-8, where it would become U+FFFD, so `'a\uD800'` and
 * `'a\uD801'` would name one scope (or class, or count as one text)
 * between them.
 */
export function wellFormed(field: string, value: string): string {
  if (!isWellFormed(value)) throw invalidArgument(field, value, LONE_SURROGATE);
  return value;
}

/**
 * The value as the message shows it: strings quoted, objects as JSON where
 * they have one (plain objects and arrays; a cycle or a BigInt inside has
 * none), other objects by their class.
 */
export function shownValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value) || (typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype)) {
    try {
      const json = JSON.stringify(value);
      if (json !== undefined) return json.length > 200 ? `${json.slice(0, 197)}...` : json;
    } catch {
      // A cycle or a BigInt: no JSON, the type will do.
    }
  }
  return String(value);
}

/**
 * A config that cannot be read (a file that is not there): the same
 * `InvalidConfigError` the addon throws for a bad field.
 */
export function invalidConfig(field: string, value: string, reason: string): InvalidConfigError {
  const error = new InvalidConfigError(`invalid config: \`${field}\` = \`${value}\`: ${reason}`, 'invalid_config');
  Object.assign(error, { field, value, reason });
  return error;
}

/** `value` as JSON text, or an `InvalidRequestError` on `field` (a cycle, a BigInt). */
export function jsonOf(field: string, value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (error) {
    throw invalidArgument(field, value, `cannot be written as JSON: ${(error as Error).message.split('\n')[0]}`);
  }
}

/**
 * A config object as JSON text, for the addon. A number JSON cannot hold
 * (NaN, ±Infinity) is refused naming its path, as the core names a TOML
 * `nan`: JSON.stringify writes it as null, which every optional field
 * reads as left out (`safety_margin: NaN` loaded as the default 1).
 */
export function configJsonOf(config: unknown): string {
  refuseNonFinite(config, '', new Set());
  return jsonOf('config', config);
}

function refuseNonFinite(value: unknown, path: string, seen: Set<object>): void {
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw invalidConfig(path || 'config', String(value), 'must be a finite number');
  }
  // A cycle is jsonOf's to refuse.
  if (value === null || typeof value !== 'object' || seen.has(value)) return;
  seen.add(value);
  if (Array.isArray(value)) {
    value.forEach((item, index) => refuseNonFinite(item, `${path}[${index}]`, seen));
  } else {
    for (const [key, item] of Object.entries(value)) refuseNonFinite(item, path ? `${path}.${key}` : key, seen);
  }
}

/**
 * Refuses a key of `object` that is not one of `known`, naming it (and the
 * known key it likely misspells): a misspelt count would otherwise be
 * ignored, and default to 0.
 */
export function knownKeys(object: unknown, known: ReadonlySet<string>, what: string): void {
  if (object === null || typeof object !== 'object') return;
  for (const key in object) {
    if (!known.has(key)) {
      const near = nearest(key, known);
      const hint = near === undefined ? `known: ${[...known].join(', ')}` : `did you mean ${near}?`;
      throw invalidArgument(key, (object as Record<string, unknown>)[key], `is not a field of ${what}; ${hint}`);
    }
  }
}

function nearest(key: string, known: ReadonlySet<string>): string | undefined {
  const squash = (k: string) => k.toLowerCase().replace(/_/g, '').replace(/ies$/, 'y').replace(/s$/, '');
  return [...known].find((k) => squash(k) === squash(key));
}
