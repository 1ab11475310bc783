/**
 * The permit a governed fetch holds, of a `Governor` or a `RedisGovernor`,
 * and how the fetch reconciles it: with the provider's usage, with what it
 * holds, with its input alone, or refunded. A local permit reconciles at
 * once and a Redis one on the thread pool; both are awaited alike.
 */
import type { Permit } from './permit';
import type { RedisPermit } from './redis';
import type { AnyUsage } from './usage';

/** What a permit holds: settled with it, it is charged what its expiry would charge. */
interface Holding {
  inputTokens: number;
  cachedInputTokens: number;
  outputTokens: number;
}

/** A permit of either governor, as the governed fetch reconciles it. */
export interface HeldPermit {
  readonly pending: boolean;
  report(status: number, headers: Headers, body: string): void;
  settle(usage: AnyUsage): Promise<void>;
  cancel(): Promise<void>;
  /** What it holds while pending. */
  holding(): Holding | null;
}

/** A local permit, whose reconciling throws at once, as a {@link HeldPermit}. */
export function localPermit(permit: Permit): HeldPermit {
  return {
    get pending() {
      return permit.state === 'pending';
    },
    report: (status, headers, body) => void permit.report(status, headers, body),
    settle: async (usage) => permit.settle(usage),
    cancel: async () => permit.cancel(),
    holding: () => permit.info(),
  };
}

/** A Redis permit as a {@link HeldPermit}. */
export function redisPermit(permit: RedisPermit): HeldPermit {
  return {
    get pending() {
      return permit.state === 'pending';
    },
    report: (status, headers, body) => void permit.report(status, headers, body),
    settle: (usage) => permit.settle(usage),
    cancel: () => permit.cancel(),
    // Until reconciled, what it charges is its estimate.
    holding: () => (permit.state === 'pending' ? permit.charged : null),
  };
}

const codeOf = (error: unknown) => (error as { code?: string } | null)?.code;

/**
 * Swallows only `permit_expired` (a stream read for longer than the permit
 * TTL: it was charged as estimated already), rethrows the rest.
 */
function ignoreExpired(error: unknown): void {
  if (codeOf(error) !== 'permit_expired') throw error;
}

/**
 * Settles with the provider's usage. An answer with a usage that is not one
 * (`{}`, a negative or string count: a provider's or a proxy's bug) is not
 * the caller's error: the answer has arrived and must reach them, so the
 * permit is settled with `otherwise` (a stream's: the output it carried)
 * or as estimated instead.
 */
export async function settleFromProvider(permit: HeldPermit, usage: AnyUsage, otherwise?: () => AnyUsage): Promise<void> {
  if (permit.pending) {
    for (const attempt of otherwise ? [usage, otherwise()] : [usage]) {
      try {
        await permit.settle(attempt);
        return;
      } catch (error) {
        if (codeOf(error) !== 'invalid_request') return ignoreExpired(error);
      }
    }
  }
  await settleAsEstimated(permit);
}

/** Settles a still pending permit with what it holds: what its expiry would charge, at once. */
export async function settleAsEstimated(permit: HeldPermit): Promise<void> {
  const held = permit.pending ? permit.holding() : null;
  if (held === null) return;
  try {
    await permit.settle({ inputTokens: held.inputTokens, cachedInputTokens: held.cachedInputTokens, outputTokens: held.outputTokens });
  } catch (error) {
    ignoreExpired(error);
  }
}

/** Settles a still pending permit with its input and no output: a request that reached the provider, unanswered. */
export async function settleInput(permit: HeldPermit, inputTokens: number): Promise<void> {
  if (!permit.pending) return;
  try {
    await permit.settle({ inputTokens, outputTokens: 0 });
  } catch (error) {
    ignoreExpired(error);
  }
}

/** Refunds a permit; one that outlived its TTL meanwhile was charged as estimated, which stands. */
export async function cancelUnlessExpired(permit: HeldPermit): Promise<void> {
  try {
    await permit.cancel();
  } catch (error) {
    ignoreExpired(error);
  }
}
