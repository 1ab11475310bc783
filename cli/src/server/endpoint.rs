//! The server's state: a provider model per API behind a mutex, the clock
//! that drives them, and the guard that always gives an admitted request's
//! slot back.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::{MockConfig, OutputTokens, ServerSettings};
use super::request::ChatRequest;
use crate::error::CliError;
use crate::provider::{Admitted, ApiShape, Provider, ProviderRequest, ProviderUsage, Rejected};

/// Real time as the provider model takes it: nanoseconds since the server
/// started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Clock { origin: Instant::now() }
    }

    /// Nanoseconds since the start (saturating after 584 years).
    pub fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct App {
    /// Behind `/v1/chat/completions`.
    pub openai: Option<Arc<Endpoint>>,
    /// Behind `/v1/messages`.
    pub anthropic: Option<Arc<Endpoint>>,
    /// The providers' time.
    pub clock: Clock,
    /// The `[server]` table.
    pub settings: ServerSettings,
}

impl App {
    /// The providers of `config`, with their clocks starting now.
    pub fn new(config: &MockConfig) -> Result<Self, CliError> {
        let clock = Clock::start();
        // RFC 3339 resets are wall-clock times: anchor `now = 0` to the wall clock.
        let wall_origin = SystemTime::now();
        let seed = config.server.seed;
        let endpoint = |shape: ApiShape, index: u64| -> Result<Option<Arc<Endpoint>>, CliError> {
            let provider_config = match shape {
                ApiShape::Openai => config.openai.clone(),
                ApiShape::Anthropic => config.anthropic.clone(),
            };
            let Some(provider_config) = provider_config else { return Ok(None) };
            // Distinct streams per API and per purpose, all from the one seed.
            let provider = Provider::new(provider_config, seed.wrapping_add(2 * index), wall_origin)?;
            let lengths = ChaCha8Rng::seed_from_u64(seed.wrapping_add(2 * index + 1));
            Ok(Some(Arc::new(Endpoint { shape, model: Mutex::new(Model { provider, lengths }) })))
        };
        Ok(App {
            openai: endpoint(ApiShape::Openai, 0)?,
            anthropic: endpoint(ApiShape::Anthropic, 1)?,
            clock,
            settings: config.server.clone(),
        })
    }

    /// The endpoint of `shape`, if configured.
    pub fn endpoint(&self, shape: ApiShape) -> Option<&Arc<Endpoint>> {
        match shape {
            ApiShape::Openai => self.openai.as_ref(),
            ApiShape::Anthropic => self.anthropic.as_ref(),
        }
    }
}

/// One API's provider.
#[derive(Debug)]
pub(crate) struct Endpoint {
    shape: ApiShape,
    model: Mutex<Model>,
}

#[derive(Debug)]
struct Model {
    provider: Provider,
    /// Draws how long each answer wants to be.
    lengths: ChaCha8Rng,
}

impl Endpoint {
    /// The API it speaks.
    pub fn shape(&self) -> ApiShape {
        self.shape
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        // The model's state stays consistent between calls, so a handler
        // that panicked must not take every later request down with it.
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits `req` now, or says why not. The lock is held for the call only.
    pub fn admit(self: &Arc<Self>, clock: Clock, req: &ChatRequest, lengths: OutputTokens) -> Result<Slot, Rejected> {
        let mut model = self.lock();
        let desired = model.lengths.random_range(lengths.min..=lengths.max);
        let provider_request = ProviderRequest {
            key: req.key.clone(),
            input_tokens: req.input_tokens,
            prompt_chars: req.prompt_chars,
            max_tokens: req.max_tokens,
            desired_output_tokens: desired,
        };
        let admitted = model.provider.admit(clock.now(), &provider_request)?;
        let produced = admitted.output_tokens;
        Ok(Slot {
            endpoint: Arc::clone(self),
            clock,
            admitted,
            truncated: desired > req.max_tokens,
            produced,
            open: true,
        })
    }
}

/// An admitted request holding its in-flight slot until it is finished,
/// explicitly or by being dropped (the client hung up, the task was
/// cancelled): a leaked slot would wedge a concurrency limit for good.
#[derive(Debug)]
pub(crate) struct Slot {
    endpoint: Arc<Endpoint>,
    clock: Clock,
    admitted: Admitted,
    truncated: bool,
    /// Output tokens to charge if the request ends early.
    produced: u64,
    open: bool,
}

impl Slot {
    /// What the provider admitted.
    pub fn admitted(&self) -> &Admitted {
        &self.admitted
    }

    /// `max_tokens` cuts the answer short.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Records that `tokens` output tokens have reached the client; a
    /// stream cut short is charged for these only, as providers stop
    /// generating (and billing) when the client goes away. A plain answer
    /// is charged in full: its generation has begun when the client could
    /// hang up.
    pub fn set_produced(&mut self, tokens: u64) {
        self.produced = tokens.min(self.admitted.output_tokens);
    }

    /// Ends the request with what it produced, freeing its slot.
    pub fn finish(&mut self) -> ProviderUsage {
        self.open = false;
        let mut admitted = self.admitted.clone();
        admitted.output_tokens = self.produced;
        let now = self.clock.now();
        self.endpoint.lock().provider.finish(now, &admitted).0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.open {
            self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(toml: &str) -> App {
        App::new(&MockConfig::parse(toml).unwrap()).unwrap()
    }

    fn request(max_tokens: u64) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            key: "k".into(),
            input_tokens: 2,
            prompt_chars: 8,
            max_tokens,
            stream: false,
            include_usage: false,
        }
    }

    #[test]
    fn a_dropped_slot_frees_its_concurrency() {
        let app = app("[openai]\nshape = \"openai\"\nconcurrency = 1\n");
        let endpoint = app.openai.as_ref().unwrap();
        let lengths = app.settings.output_tokens;
        let slot = endpoint.admit(app.clock, &request(100), lengths).unwrap();
        assert_eq!(endpoint.admit(app.clock, &request(100), lengths).unwrap_err().status, 429);
        drop(slot);
        let mut again = endpoint.admit(app.clock, &request(100), lengths).unwrap();
        assert_eq!(again.finish().input_tokens, 2);
    }

    #[test]
    fn max_tokens_caps_the_answer_and_marks_it_truncated() {
        let app = app("[server]\noutput_tokens = { min = 50, max = 60 }\n[anthropic]\nshape = \"anthropic\"\n");
        let endpoint = app.anthropic.as_ref().unwrap();
        let slot = endpoint.admit(app.clock, &request(10), app.settings.output_tokens).unwrap();
        assert_eq!(slot.admitted().output_tokens, 10);
        assert!(slot.truncated());
    }
}
