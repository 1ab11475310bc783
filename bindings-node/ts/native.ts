/**
 * The addon, as `@napi-rs/cli` generated its loader (`index.js`) and types
 * (`index.d.ts`). Everything public wraps it; nothing else loads it.
 */
import * as native from '../index.js';

export default native;

/** The addon's governor, which every public wrapper holds. */
export type NativeGovernor = InstanceType<typeof native.NativeGovernor>;
export type {
  Advice,
  AdviceReason,
  Classification,
  ClassMetrics,
  EstimateErrorSummary,
  LimitSnapshot,
  Metrics,
  PermitInfo,
  QueueMetrics,
  RefusalCount,
  RequestEstimate,
  RetryOptions,
  ProfileArgs,
  ProfileGrant,
  ScopeSnapshot,
  Snapshot,
  WaitHistogram,
} from '../index.js';
