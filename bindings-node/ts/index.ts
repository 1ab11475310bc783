/**
 * llmgov: a rate-limit governor for LLM APIs.
 *
 * ```js
 * const { Governor } = require('llmgov');
 * const gov = Governor.fromPreset('openai-gpt-4o-tier1');
 * const route = gov.route(['openai/org/gpt-4o']);
 * const permit = gov.tryAcquire({ route, inputTokens: 1200, maxOutputTokens: 300 });
 * // … call the provider …
 * permit.settle({ inputTokens: 1180, outputTokens: 212 });
 * ```
 */
export { Governor } from './governor';
export { Permit, RoutedPermit } from './permit';
export type { AcquireRequest, WaitOptions, WaitRequest, ClockKind, GovernorOptions, Profile, ProfileRequest, ProfileWaitRequest, Route } from './governor';
export type { APIErrorLike, PermitState, ResponseLike } from './permit';
export type { BreakerChangedEvent, DeniedEvent, EventListener, GovernorEvent, ProviderRejectedEvent } from './events';
export type {
  ClassMetrics,
  EstimateErrorSummary,
  LimitSnapshot,
  Metrics,
  PermitInfo,
  QueueMetrics,
  RefusalCount,
  ScopeSnapshot,
  Snapshot,
  WaitHistogram,
} from './native';
export {
  AlreadyReconciledError,
  CircuitOpenError,
  DeadlineExceededError,
  InvalidConfigError,
  InvalidPathError,
  InvalidRequestError,
  LlmgovError,
  NeverFitsError,
  PermitExpiredError,
  PermitFinishedError,
  QueueFullError,
  RateLimitedError,
  UnknownPresetError,
  UnknownScopeError,
} from './errors';
export { RedisGovernor, RedisPermit } from './redis';
export type { RedisAcquireRequest, RedisCharge, RedisHealth, RedisPermitState, RedisRoute, RedisWaitRequest } from './redis';
export { classifyResponse, RetryPolicy } from './feedback';
export type { Advice, AdviceReason, AttemptOutcome, BodyLike, Classification, ClassifyOptions, Provider, RetryOptions } from './feedback';
export { countChatTokens, countTokens, estimateTokens } from './tokens';
export { planCapacity } from './plan';
export type { CapacityPlan, PlanCeiling, PlanLimit, PlanOptions } from './plan';
export type { AnthropicUsage, AnyUsage, OpenAIResponsesUsage, OpenAIUsage, Usage } from './usage';
export type { HeadersLike } from './headers';
export { governedFetch } from './fetch';
export type { AttemptEvent, GovernedFetchOptions, GovernedRequest } from './fetch';
