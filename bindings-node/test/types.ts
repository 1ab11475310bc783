// Type-checked (never run) against the published typings by
// scripts/check-generated.mjs: the API a TypeScript user writes compiles.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

import {
  CircuitOpenError,
  Classification,
  ClassMetrics,
  EstimateErrorSummary,
  countChatTokens,
  countTokens,
  governedFetch,
  Governor,
  GovernorEvent,
  LlmgovError,
  Metrics,
  Permit,
  CapacityPlan,
  PlanCeiling,
  PlanLimit,
  PlanOptions,
  planCapacity,
  Profile,
  RateLimitedError,
  RefusalCount,
  RetryPolicy,
  Route,
  RoutedPermit,
  Snapshot,
  WaitHistogram,
  classifyResponse,
  AlreadyReconciledError,
  DeadlineExceededError,
  RedisGovernor,
  RedisHealth,
  RedisPermit,
  RedisRoute,
} from '..';

const gov: Governor = Governor.fromToml('[scopes."openai/org/gpt-4o"]\nlimits = []', { clock: 'manual' });
const route: Route = gov.route(['openai/org/gpt-4o']);
const permit: Permit = gov.tryAcquire({ route, inputTokens: countTokens('hi'), maxOutputTokens: 10, klass: 'batch' });
permit.settle({ inputTokens: 1, outputTokens: 2, cachedInputTokens: 0 });
permit.settle({ outputTokens: 2 });
permit.settle();
permit.settle({ prompt_tokens: 1, completion_tokens: 2 });
permit.settle({ input_tokens: 1, output_tokens: 2, cache_read_input_tokens: 0 });
const c: Classification = permit.report(429, { 'retry-after': '1' }, '');
const fromResponse: Promise<Classification> = permit.report(new Response(''));
const s: Snapshot = gov.snapshot();
const n: number = s.scopes[0].limits[0].available + countChatTokens([{ role: 'user', content: 'x' }], 'gpt-4o');
try {
  gov.tryAcquire({ paths: ['openai/org/gpt-4o'], messages: [], model: 'gpt-4o' });
} catch (e) {
  if (e instanceof RateLimitedError) {
    const wait: number | null = e.retryAfterMs;
    void wait;
  } else if (e instanceof LlmgovError) {
    const code: string = e.code;
    void code;
  }
}
const advice = new RetryPolicy({ maxRetries: 3 }).advise({ attempt: 0, status: 429 });
const delay: number | undefined = advice.delayMs;
const k = classifyResponse(200, new Headers()).kind;

const profile: Profile = gov.profile('gpt-4o', ['tenants/acme']);
const routed: RoutedPermit = gov.tryAcquireProfile({ profile, inputTokens: 1, klass: 'eval' });
const placed: [string, string, boolean, boolean] = [routed.profile, routed.deployment, routed.fellBack, routed.degraded];
const asPermit: Permit = gov.tryAcquireProfile({ profile: 'gpt-4o', consumer: ['tenants/acme'], messages: [] });
const waitedRouted: Promise<RoutedPermit> = gov.acquireProfile({ profile, inputTokens: 1, priority: 1, deadlineMs: 1, signal: AbortSignal.timeout(1) });
const metrics: string = gov.prometheus();
const observed: Metrics = gov.metrics();
const asJson: string = gov.metricsJson();
const sameSnapshot: Snapshot = observed.snapshot;
const refusal: RefusalCount = observed.refusals[0];
const decision: 'rejected_locally' | 'admitted_then_provider_rejected' = refusal.gatewayDecision;
// @ts-expect-error who refused is one of two
const notADecision: 'rejected' = refusal.gatewayDecision;
const estimate: EstimateErrorSummary = observed.estimateErrors[0];
const side: 'input' | 'output' = estimate.side;
const bias: number = estimate.p50 + estimate.samples + observed.retryAmplification;
const queue: ClassMetrics = observed.queues.classes[0];
const className: string = queue.klass;
const waits: WaitHistogram = queue.wait;
const waited: number = waits.sumMs + waits.counts[0] + waits.boundsMs[0] + queue.borrowedTokens;
// @ts-expect-error a class's name is `klass`, as in requests, events and errors
void queue.class;
void [asJson, sameSnapshot, decision, notADecision, side, bias, className, waited];
const stop: () => void = gov.onEvent((event: GovernorEvent) => {
  switch (event.event) {
    case 'denied': {
      const wait: number | null = event.retryAfterMs;
      const klass: string = event.klass;
      void [wait, klass];
      break;
    }
    case 'provider_rejected': {
      const scopes: string[] = event.scopes;
      void scopes;
      break;
    }
    case 'breaker_changed': {
      const state: 'open' | 'closed' = event.state;
      void state;
      break;
    }
  }
});
const dropped: number = gov.droppedEvents();
try {
  routed.cancel();
} catch (e) {
  if (e instanceof CircuitOpenError) {
    const probeIn: number = e.retryAfterMs;
    void probeIn;
  }
}
void [placed, asPermit, waitedRouted, metrics, stop, dropped];

const openai = new OpenAI({ apiKey: 'x', maxRetries: 0, fetch: governedFetch(gov, fetch, { paths: ['openai/org/gpt-4o'] }) });
const anthropic = new Anthropic({ apiKey: 'x', maxRetries: 0, fetch: governedFetch(gov, fetch, { paths: (r) => [`anthropic/${r.body?.model}`] }) });
void [c, fromResponse, n, delay, k, openai, anthropic];

const planned: CapacityPlan = planCapacity({ rpm: 60, tpm: 100_000, avgInput: 1500, avgOutput: 500, utilisation: 1 });
const binds: PlanLimit = planned.binding;
const ceiling: PlanCeiling = planned.ceilings[0];
const reserving: number | null = planned.sustainableRpmReservingP95;
const shape: PlanOptions = { concurrency: 10, latency: 30, avgInput: 1, avgOutput: 1, p95Input: 2, p95Output: 2 };
// @ts-expect-error the averages are required
planCapacity({ rpm: 60, avgOutput: 500 });
// @ts-expect-error options are camelCase
planCapacity({ rpm: 60, avgInput: 1, avgOutput: 1, input_tpm: 5 });
void [binds, ceiling, reserving, shape, planned.sustainableRpm];

async function shared(): Promise<void> {
  const redis: RedisGovernor = RedisGovernor.fromToml('gov.toml', { clock: 'manual' });
  const fromObject = RedisGovernor.fromJson({ scopes: {}, redis: { prefix: 'p', expected_processes: 2, scopes: {} } });
  const sharedRoute: RedisRoute = redis.route(['openai/org/gpt-4o']);
  const held: RedisPermit = await redis.tryAcquire({ route: sharedRoute, inputTokens: 1, maxOutputTokens: 2, cachedInputTokens: 0 });
  await held.settle({ prompt_tokens: 1, completion_tokens: 2 });
  await held.settle();
  const waited: RedisPermit = await redis.acquire({ paths: ['x'], text: 'hi', deadlineMs: 10, signal: AbortSignal.timeout(5) });
  await waited.cancel();
  const charged: number = waited.charged.outputTokens + (waited.fromFallback ? 1 : 0);
  const health: RedisHealth = redis.health();
  const calls: number = health.redisCalls;
  // @ts-expect-error shared scopes have no traffic classes
  await redis.tryAcquire({ paths: ['x'], klass: 'batch' });
  try {
    await held.cancel();
  } catch (e) {
    if (e instanceof AlreadyReconciledError || e instanceof DeadlineExceededError) void e.code;
  }
  await redis.returnLeases();
  void [fromObject, charged, calls, waited.state];
}
void shared;
