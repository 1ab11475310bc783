//! `tracing` spans: routing by profile (`llmgov.route`, with the deployment
//! chosen or the refusal) and each wait in a queue (`llmgov.wait`, open for
//! as long as the request waits, with how it ended), as a subscriber sees
//! them when they close.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llmgov::{Config, Governor, ManualClock, Request};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A closed span: its name and its fields as text.
type Closed = (String, BTreeMap<String, String>);

/// Records every span's fields, and the span when it closes.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Closed>>>);

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        ctx.span(id).expect("a new span is registered").extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span is registered");
        values.record(span.extensions_mut().get_mut::<Fields>().expect("fields kept at creation"));
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("a closing span is registered");
        let fields = span.extensions().get::<Fields>().map(|f| f.0.clone()).unwrap_or_default();
        self.0.lock().unwrap().push((span.name().to_owned(), fields));
    }
}

impl Recorder {
    fn closed(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        self.0.lock().unwrap().iter().filter(|(n, _)| n == name).map(|(_, f)| f.clone()).collect()
    }
}

fn traced<T>(body: impl FnOnce() -> T) -> (T, Recorder) {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    (tracing::subscriber::with_default(subscriber, body), recorder)
}

fn field<'a>(span: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    span.get(name).map(String::as_str).unwrap_or_else(|| panic!("no `{name}` in {span:?}"))
}

#[test]
fn routing_is_traced_with_the_deployment_chosen_or_the_refusal() {
    let config = json!({
        "scopes": {
            "openai/org": {"provider": true, "limits": [{"dimension": "tokens", "amount": 10000, "window": "1m"}]},
            "azure/eastus": {"provider": true, "limits": [{"dimension": "tokens", "amount": 8000, "window": "1m"}]},
        },
        "profiles": {"gpt-4o": {"deployments": ["openai/org", "azure/eastus"]}},
    });
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap();
    let profile = gov.profile("gpt-4o", &[] as &[&str]).unwrap();
    let ask = |tokens| gov.try_acquire_profile(&profile, &Request::new(profile.primary()).input_tokens(tokens));
    let (outcomes, recorder) = traced(|| [ask(9000).is_ok(), ask(7000).is_ok(), ask(5000).is_ok()]);
    assert_eq!(outcomes, [true, true, false]);
    let spans = recorder.closed("llmgov.route");
    assert_eq!(spans.len(), 3, "{spans:?}");
    assert_eq!(field(&spans[0], "profile"), "gpt-4o");
    assert_eq!(field(&spans[0], "deployment"), "openai/org");
    assert_eq!(field(&spans[1], "deployment"), "azure/eastus");
    assert_eq!(field(&spans[1], "fell_back"), "false");
    assert_eq!(field(&spans[2], "refused"), "rate_limited");
    assert!(!spans[2].contains_key("deployment"), "{:?}", spans[2]);
}

#[test]
fn each_wait_is_a_span_that_closes_when_the_wait_ends() {
    let config = json!({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}}});
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let request = Request::new(gov.route(&["p"]).unwrap());
    let (_, recorder) = traced(|| {
        let _first = gov.try_acquire(&request).unwrap();
        let mut admitted = gov.acquire(&request);
        let withdrawn = gov.acquire(&request);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::pin::Pin::new(&mut admitted).poll(&mut context).is_pending());
        drop(withdrawn);
        clock.advance(Duration::from_secs(1));
        gov.wake_waiters();
        assert!(std::pin::Pin::new(&mut admitted).poll(&mut context).is_ready());
    });
    let waits = recorder.closed("llmgov.wait");
    let outcomes: Vec<&str> = waits.iter().map(|w| field(w, "outcome")).collect();
    assert_eq!(outcomes, ["withdrawn", "admitted"], "{waits:?}");
    assert_eq!(field(&waits[0], "class"), "");
}
