/**
 * Waiting, shared by {@link Governor.acquire} and
 * {@link Governor.acquireProfile}: the options, the ticket each call gives
 * the addon, and the Promise the addon hands back (see `src/waiting.rs`).
 */
import native from './native';
import { invalidArgument } from './errors';

/** How to wait: what {@link Governor.acquire} and {@link Governor.acquireProfile} add to a request. */
export interface WaitOptions {
  /** Aborting it stops the wait (the request leaves the queue) and rejects with its reason. */
  signal?: AbortSignal;
  /** Order among the tenant's waiting requests of the class: higher first (default 0). */
  priority?: number;
  /** The longest to wait, in ms (the class's maximum wait caps it). */
  deadlineMs?: number;
}

/** The addon's `WaitArgs`, but for the governor's id. */
export interface WaitNumbers {
  ticket: number;
  priority: number;
  deadlineMs: number | undefined;
}

/** The request's `signal`, if it has one; an `InvalidRequestError` if it is not an `AbortSignal`. */
export function signalOf(options: WaitOptions | null | undefined): AbortSignal | undefined {
  const signal = options?.signal;
  if (signal === undefined || signal instanceof AbortSignal) return signal;
  throw invalidArgument('signal', signal, 'must be an AbortSignal');
}

/** Numbers for the waiting calls, for abort and errors. */
let tickets = 0;

/** Checks `options` and numbers the call. */
export function waitNumbers(options: WaitOptions): WaitNumbers {
  const priority = options.priority ?? 0;
  if (typeof priority !== 'number' || !Number.isInteger(priority) || Math.abs(priority) > 2 ** 31 - 1) {
    throw invalidArgument('priority', priority, 'must be an integer of at most 2^31 - 1 either way');
  }
  const deadline = options.deadlineMs;
  if (deadline !== undefined && typeof deadline !== 'number') {
    throw invalidArgument('deadlineMs', deadline, 'must be a number');
  }
  return { ticket: (tickets = (tickets + 1) >>> 0), priority, deadlineMs: deadline };
}

/**
 * What a wait the addon started under `ticket` granted: at once, or once
 * its Promise resolves. Throws the refusal (mapped by the addon), or the
 * signal's reason when it was aborted (the addon then drops the wait).
 */
export async function granted<T>(started: T | Promise<T | null>, ticket: number, signal: AbortSignal | undefined): Promise<T> {
  if (!(started instanceof Promise)) return started; // admitted at once
  const abort = () => native.acquireAbort(ticket);
  signal?.addEventListener('abort', abort, { once: true });
  let grant: T | null;
  try {
    grant = await started;
  } finally {
    signal?.removeEventListener('abort', abort);
  }
  if (grant === null && native.acquireError(ticket)) throw signal?.reason;
  return grant as T;
}

/** `permit`, unless the signal fired as it was granted: the caller has gone, so it is given back. */
export function keptUnlessAborted<P extends { cancel(): void }>(permit: P, signal: AbortSignal | undefined): P {
  if (signal?.aborted) {
    permit.cancel();
    throw signal.reason;
  }
  return permit;
}
