/**
 * Events: what a governor refused, what providers refused, and breaker
 * changes, as plain objects, to listeners set with {@link Governor.onEvent}.
 *
 * Delivery (see `src/events.rs`): events are queued for the JavaScript
 * thread from whichever thread raised them and delivered in order, after the
 * call that caused them has returned, so a listener may use the governor.
 * Listeners never keep the process alive: the queue holds the event loop
 * only until the events this thread's own calls raised are delivered. It
 * holds at most 4096 events; past that, events are
 * dropped and counted ({@link Governor.droppedEvents}). A listener that
 * throws (or returns a promise that rejects) is reported as a process
 * warning (`LlmgovEventListenerWarning`), never as an uncaught exception;
 * the other listeners still run.
 */

/** A request llmgov refused before it left (the refusal was also thrown or rejected). */
export interface DeniedEvent {
  event: 'denied';
  /** The error's code: `rate_limited`, `never_fits`, `circuit_open`, `queue_full`, `deadline_exceeded`. */
  code: string;
  /** The scope that refused, where one did. */
  scope: string | null;
  /** The dimension that refused, where one did. */
  dimension: string | null;
  /** When it could pass, in ms, where that is known. */
  retryAfterMs: number | null;
  /** The request's traffic class (empty for the default class). */
  klass: string;
}

/** The provider refused a request llmgov had admitted (reported with `permit.report`). */
export interface ProviderRejectedEvent {
  event: 'provider_rejected';
  /** The provider scopes of the request's route. */
  scopes: string[];
  /** Why. */
  kind: 'rate_limited' | 'quota_exhausted' | 'overloaded' | 'too_large';
  /** The limit the provider named (`unknown` if it named none). */
  dimension: string;
  /** The provider's own wait, in ms. */
  retryAfterMs: number | null;
}

/** A provider scope's circuit breaker opened or closed. */
export interface BreakerChangedEvent {
  event: 'breaker_changed';
  /** The provider scope. */
  scope: string;
  state: 'open' | 'closed';
}

/** Every event a governor raises; switch on `event`. */
export type GovernorEvent = DeniedEvent | ProviderRejectedEvent | BreakerChangedEvent;

/** A function {@link Governor.onEvent} calls with each event. */
export type EventListener = (event: GovernorEvent) => void | Promise<void>;

/**
 * The one function the addon calls for a governor: runs every listener,
 * shielding the process from what they throw. It closes over the listener
 * set only, never over the governor, so that the addon's reference to it
 * keeps no governor alive.
 */
export function dispatcher(listeners: ReadonlySet<EventListener>): (raw: Record<string, unknown>) => void {
  return (raw) => {
    // The addon builds every event from the core's, in the shapes above.
    const event = raw as unknown as GovernorEvent;
    for (const listener of [...listeners]) {
      try {
        const result = listener(event);
        if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
          result.then(undefined, (error: unknown) => warn(error, event));
        }
      } catch (error) {
        warn(error, event);
      }
    }
  };
}

function warn(error: unknown, event: GovernorEvent): void {
  const detail = error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.emitWarning(`an llmgov event listener threw on a ${event.event} event: ${detail}`, {
    type: 'LlmgovEventListenerWarning',
    code: 'LLMGOV_EVENT_LISTENER',
  });
}
