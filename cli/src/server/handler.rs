//! The HTTP side: a chat request is read, admitted by the provider model,
//! then answered after the model's latency, as one body or as a paced
//! stream of server-sent events.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header::{ALLOW, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use super::endpoint::{App, Slot};
use super::reply::Reply;
use super::request;
use crate::provider::{error_body, ApiShape, Rejected, RejectionKind};

/// A request body, or why it could not be read (over the size limit, cut
/// short), which is answered in the provider's shape rather than axum's
/// plain text.
type BodyOrError = Result<Bytes, BytesRejection>;

/// `POST /v1/chat/completions`.
pub(crate) async fn openai(State(app): State<Arc<App>>, headers: HeaderMap, body: BodyOrError) -> Response {
    match body {
        Ok(body) => chat(&app, ApiShape::Openai, &headers, &body).await,
        Err(rejection) => unreadable_body(ApiShape::Openai, &rejection),
    }
}

/// `POST /v1/messages`.
pub(crate) async fn anthropic(State(app): State<Arc<App>>, headers: HeaderMap, body: BodyOrError) -> Response {
    match body {
        Ok(body) => chat(&app, ApiShape::Anthropic, &headers, &body).await,
        Err(rejection) => unreadable_body(ApiShape::Anthropic, &rejection),
    }
}

/// Another method on an endpoint's path: 405 in that endpoint's shape,
/// with `Allow: POST`.
pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let shape = if uri.path() == "/v1/messages" { ApiShape::Anthropic } else { ApiShape::Openai };
    let message = format!("Method {method} is not allowed on {}; use POST", uri.path());
    let body = match shape {
        ApiShape::Openai => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "method_not_allowed"}})
        }
        ApiShape::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
    };
    let mut response = json_response(StatusCode::METHOD_NOT_ALLOWED, body.to_string());
    response.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
    response
}

/// A body that could not be read: Anthropic's `request_too_large` (413) for
/// one over the size limit, else a 400 `invalid_request_error`.
fn unreadable_body(shape: ApiShape, rejection: &BytesRejection) -> Response {
    let status = rejection.status();
    if status != StatusCode::PAYLOAD_TOO_LARGE {
        return bad_request(shape, &format!("the request body could not be read: {}", rejection.body_text()));
    }
    let message = "Request exceeds the maximum allowed number of bytes.";
    let body = match shape {
        ApiShape::Openai => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "request_too_large"}})
        }
        ApiShape::Anthropic => json!({"type": "error", "error": {"type": "request_too_large", "message": message}}),
    };
    json_response(status, body.to_string())
}

/// Any other path: 404, in Anthropic's shape if the request looks like an
/// Anthropic client's, else in OpenAI's.
pub(crate) async fn fallback(uri: Uri, headers: HeaderMap) -> Response {
    let anthropic = headers.contains_key("anthropic-version") || headers.contains_key("x-api-key");
    let shape = if anthropic { ApiShape::Anthropic } else { ApiShape::Openai };
    not_found(shape, &format!("Unknown path {}", uri.path()))
}

async fn chat(app: &App, shape: ApiShape, headers: &HeaderMap, body: &[u8]) -> Response {
    let Some(endpoint) = app.endpoint(shape) else {
        return not_found(shape, "This mock server has no provider configured for this API");
    };
    let req = match request::parse(endpoint.shape(), headers, body, app.settings.default_max_tokens) {
        Ok(req) => req,
        Err(message) => return bad_request(shape, &message),
    };
    let slot = match endpoint.admit(app.clock, &req, app.settings.output_tokens) {
        Ok(slot) => slot,
        Err(rejected) => return refusal(rejected),
    };
    let admitted = slot.admitted();
    let mut reply = Reply::new(shape, admitted.id, &req.model, admitted.input_tokens, slot.truncated());
    reply.include_usage = req.include_usage;
    if req.stream {
        stream(slot, reply)
    } else {
        plain(slot, reply).await
    }
}

/// Waits out the whole answer, then sends it with the admission's headers.
async fn plain(mut slot: Slot, reply: Reply) -> Response {
    tokio::time::sleep(Duration::from_nanos(slot.admitted().duration_ns)).await;
    let usage = slot.finish();
    let headers = response_headers(&reply, &slot.admitted().headers);
    (StatusCode::OK, headers, axum::Json(reply.body(usage))).into_response()
}

/// Sends the headers at once, then the events as the tokens come.
fn stream(mut slot: Slot, reply: Reply) -> Response {
    let headers = response_headers(&reply, &slot.admitted().headers);
    slot.set_produced(0);
    let streamer = Streamer { slot, reply, start: Instant::now(), phase: Phase::Start };
    let events = futures::stream::unfold(streamer, Streamer::step)
        .flat_map(|events| futures::stream::iter(events.into_iter().map(Ok::<Event, Infallible>)));
    (headers, Sse::new(events)).into_response()
}

/// Where a stream is.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Start,
    Token(u64),
    End,
    Done,
}

/// A stream's state. Dropping it (the client hung up) drops the slot,
/// which frees it.
struct Streamer {
    slot: Slot,
    reply: Reply,
    start: Instant,
    phase: Phase,
}

impl Streamer {
    /// The next batch of events, or `None` once the stream is over.
    async fn step(mut self) -> Option<(Vec<Event>, Self)> {
        let tokens = self.slot.admitted().output_tokens;
        let events = match self.phase {
            Phase::Start => {
                self.phase = if tokens == 0 { Phase::End } else { Phase::Token(0) };
                self.reply.start_events()
            }
            Phase::Token(i) => {
                tokio::time::sleep_until(self.start + Duration::from_nanos(self.token_at(i))).await;
                self.slot.set_produced(i + 1);
                self.phase = if i + 1 < tokens { Phase::Token(i + 1) } else { Phase::End };
                vec![self.reply.token_event(i)]
            }
            Phase::End => {
                tokio::time::sleep_until(self.start + Duration::from_nanos(self.slot.admitted().duration_ns)).await;
                let usage = self.slot.finish();
                self.phase = Phase::Done;
                self.reply.end_events(usage)
            }
            Phase::Done => return None,
        };
        Some((events, self))
    }

    /// When token `i` is due: the first after the time to first token,
    /// the rest evenly until the answer's duration. Deadlines from the
    /// start, not gaps, so that scheduling delays do not add up.
    fn token_at(&self, i: u64) -> u64 {
        let admitted = self.slot.admitted();
        let (ttft, total, tokens) = (admitted.ttft_ns, admitted.duration_ns, admitted.output_tokens);
        if tokens <= 1 {
            return ttft;
        }
        let span = u128::from(total.saturating_sub(ttft));
        ttft + u64::try_from(span * u128::from(i) / u128::from(tokens - 1)).unwrap_or(u64::MAX)
    }
}

/// The rate-limit headers, plus the request id each provider sends.
fn response_headers(reply: &Reply, limits: &[(String, String)]) -> HeaderMap {
    let mut headers = header_map(limits);
    let id_header = match reply.shape {
        ApiShape::Openai => "x-request-id",
        ApiShape::Anthropic => "request-id",
    };
    if let Ok(value) = HeaderValue::from_str(&format!("req_{}", reply.id)) {
        headers.insert(id_header, value);
    }
    headers
}

/// Headers from name-value pairs. The provider model only makes ASCII
/// names and values, so nothing is ever skipped in practice.
fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            headers.append(name, value);
        }
    }
    headers
}

/// The provider's refusal, exactly as the model made it.
fn refusal(rejected: Rejected) -> Response {
    let status = StatusCode::from_u16(rejected.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut headers = header_map(&rejected.headers);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (status, headers, Body::from(rejected.body)).into_response()
}

fn bad_request(shape: ApiShape, message: &str) -> Response {
    let kind = RejectionKind::BadRequest;
    let status = StatusCode::from_u16(kind.status(shape)).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, error_body(shape, kind, message))
}

fn not_found(shape: ApiShape, message: &str) -> Response {
    let body = match shape {
        ApiShape::Openai => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "unknown_url"}})
        }
        ApiShape::Anthropic => json!({"type": "error", "error": {"type": "not_found_error", "message": message}}),
    };
    json_response(StatusCode::NOT_FOUND, body.to_string())
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::MockConfig;

    #[tokio::test]
    async fn a_stream_dropped_mid_way_frees_its_slot() {
        let config = MockConfig::parse(
            "[openai]\nshape = \"openai\"\nconcurrency = 1\nlatency = { ttft_ms = 1, ms_per_output_token = 1000 }\n",
        )
        .unwrap();
        let app = App::new(&config).unwrap();
        let endpoint = app.openai.as_ref().unwrap();
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let req = request::parse(ApiShape::Openai, &HeaderMap::new(), body, 100).unwrap();
        let slot = endpoint.admit(app.clock, &req, app.settings.output_tokens).unwrap();
        let reply = Reply::new(ApiShape::Openai, slot.admitted().id, "m", 1, false);
        let mut events = stream(slot, reply).into_body().into_data_stream();
        let first = events.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: {"));
        assert_eq!(endpoint.admit(app.clock, &req, app.settings.output_tokens).unwrap_err().status, 429);
        // The client hangs up long before the last token.
        drop(events);
        assert!(endpoint.admit(app.clock, &req, app.settings.output_tokens).is_ok());
    }
}
