/**
 * Capacity planning: {@link planCapacity}, the core's planner (what
 * `llmgov plan` prints and Python's `plan_capacity` returns).
 */
import native from './native';
import { invalidArgument } from './errors';

/**
 * A limit, as the core, `llmgov plan` and Python name it (like
 * `Classification.kind`, the value keeps the core's spelling).
 */
export type PlanLimit = 'rpm' | 'tpm' | 'input_tpm' | 'output_tpm' | 'concurrency';

/** A deployment's limits and a workload's shape. Give at least one limit. */
export interface PlanOptions {
  /** Average input tokens per request (0 or more). */
  avgInput: number;
  /** Average output tokens per request (0 or more). */
  avgOutput: number;
  /** Requests per minute. */
  rpm?: number;
  /** Total (input + output) tokens per minute. */
  tpm?: number;
  /** Input tokens per minute. */
  inputTpm?: number;
  /** Output tokens per minute. */
  outputTpm?: number;
  /** Requests in flight at once. */
  concurrency?: number;
  /** 95th-percentile input tokens. */
  p95Input?: number;
  /** 95th-percentile output tokens (what a reservation holds until settled). */
  p95Output?: number;
  /** Average request latency in seconds, which bounds the rate under `concurrency` (default 5). */
  latency?: number;
  /** Fraction of the limits to plan for, in (0, 1] (default 0.9). */
  utilisation?: number;
}

/** One limit's ceiling on requests per minute. */
export interface PlanCeiling {
  /** The limit. */
  limit: PlanLimit;
  /** Requests per minute it allows at 100%; `Infinity` for a limit on tokens the requests do not use. */
  rpm: number;
}

/** What {@link planCapacity} returns. */
export interface CapacityPlan {
  /** Each given limit's ceiling, for average-sized requests, in the order of {@link PlanLimit}. */
  ceilings: PlanCeiling[];
  /** The limit with the lowest ceiling. */
  binding: PlanLimit;
  /** Sustainable requests per minute: the lowest ceiling × utilisation. */
  sustainableRpm: number;
  /** The same while reservations hold the p95 sizes; `null` unless `p95Input` or `p95Output` was given. */
  sustainableRpmReservingP95: number | null;
}

const OPTIONS: ReadonlyArray<keyof PlanOptions> = [
  'avgInput', 'avgOutput', 'rpm', 'tpm', 'inputTpm', 'outputTpm',
  'concurrency', 'p95Input', 'p95Output', 'latency', 'utilisation',
];
const REQUIRED: ReadonlyArray<keyof PlanOptions> = ['avgInput', 'avgOutput'];

const camel = (name: string): string => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

/**
 * The shape checks the addon cannot make with a good message: an object, no
 * unknown option (a typo would otherwise plan without that limit), finite
 * numbers, the averages given. The core checks the values' ranges.
 */
function checkOptions(options: unknown): PlanOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw invalidArgument('options', options, 'must be an object of options, e.g. { rpm, tpm, avgInput, avgOutput }');
  }
  const given = options as Record<string, unknown>;
  for (const [name, value] of Object.entries(given)) {
    if (!(OPTIONS as readonly string[]).includes(name)) {
      const hint = (OPTIONS as readonly string[]).includes(camel(name))
        ? `did you mean ${camel(name)}?`
        : `known: ${OPTIONS.join(', ')}`;
      throw invalidArgument(name, value, `is not an option of planCapacity; ${hint}`);
    }
    if (value === undefined) continue;
    if (typeof value !== 'number') throw invalidArgument(name, value, 'must be a number');
    if (!Number.isFinite(value)) throw invalidArgument(name, value, 'must be a finite number');
  }
  for (const name of REQUIRED) {
    if (given[name] === undefined) throw invalidArgument(name, undefined, 'is required: tokens per request');
  }
  return given as unknown as PlanOptions;
}

/**
 * How many requests a minute a set of limits sustains for a workload's
 * shape, and which limit binds: min(rpm, tpm ÷ tokens, inputTpm ÷ input,
 * outputTpm ÷ output, concurrency × 60 ÷ latency) × utilisation, as
 * `llmgov plan`. Bad input throws `InvalidRequestError` naming the option.
 *
 * ```js
 * const plan = planCapacity({ rpm: 60, tpm: 100000, avgInput: 1500, avgOutput: 500, utilisation: 1 });
 * plan.binding;        // 'tpm'
 * plan.sustainableRpm; // 50
 * ```
 */
export function planCapacity(options: PlanOptions): CapacityPlan {
  return native.nativePlanCapacity(checkOptions(options)) as CapacityPlan;
}
