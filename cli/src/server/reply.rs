//! Answers in each provider's shape: the plain JSON body, and the
//! server-sent events of a streamed one. The text is filler, a word per
//! output token, so that clients can check the count against the usage.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::response::sse::Event;
use serde_json::{json, Value};

use crate::provider::{ApiShape, ProviderUsage};

/// The words of the filler text, cycled.
const WORDS: [&str; 16] = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
];

/// The `i`th token of an answer as a stream delta: a word, with the space
/// that joins it to the one before.
pub(crate) fn token_text(i: u64) -> String {
    let word = WORDS[(i % WORDS.len() as u64) as usize];
    if i == 0 {
        word.to_owned()
    } else {
        format!(" {word}")
    }
}

/// A whole answer of `tokens` words.
pub(crate) fn filler(tokens: u64) -> String {
    (0..tokens).map(token_text).collect()
}

/// What an answer says about itself, whichever way it is sent.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The API it answers in.
    pub shape: ApiShape,
    /// `chatcmpl-…` or `msg_…`.
    pub id: String,
    /// The model asked for.
    pub model: String,
    /// Unix seconds, for OpenAI's `created`.
    pub created: u64,
    /// Prompt tokens, known from the start.
    pub input_tokens: u64,
    /// `max_tokens` cut the answer short.
    pub truncated: bool,
    /// OpenAI: end the stream with a usage chunk.
    pub include_usage: bool,
}

impl Reply {
    /// A reply to request number `id` of a provider.
    pub fn new(shape: ApiShape, id: u64, model: &str, input_tokens: u64, truncated: bool) -> Self {
        let id = match shape {
            ApiShape::Openai => format!("chatcmpl-mock{id:012}"),
            ApiShape::Anthropic => format!("msg_mock{id:012}"),
        };
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Reply { shape, id, model: model.to_owned(), created, input_tokens, truncated, include_usage: false }
    }

    fn stop_reason(&self) -> &'static str {
        match (self.shape, self.truncated) {
            (ApiShape::Openai, false) => "stop",
            (ApiShape::Openai, true) => "length",
            (ApiShape::Anthropic, false) => "end_turn",
            (ApiShape::Anthropic, true) => "max_tokens",
        }
    }

    /// The body of a non-streamed answer.
    pub fn body(&self, usage: ProviderUsage) -> Value {
        let text = filler(usage.output_tokens);
        match self.shape {
            ApiShape::Openai => json!({
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": null},
                    "logprobs": null,
                    "finish_reason": self.stop_reason(),
                }],
                "usage": openai_usage(usage),
            }),
            ApiShape::Anthropic => json!({
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": self.stop_reason(),
                "stop_sequence": null,
                "usage": anthropic_usage(usage),
            }),
        }
    }

    /// The events sent with the headers, before the first token.
    pub fn start_events(&self) -> Vec<Event> {
        match self.shape {
            ApiShape::Openai => vec![self.openai_chunk(json!({"role": "assistant", "content": ""}), Value::Null)],
            ApiShape::Anthropic => {
                let message = json!({
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                    "stop_reason": null, "stop_sequence": null,
                    // Anthropic reports one output token at the start, and the total at the end.
                    "usage": {"input_tokens": self.input_tokens, "output_tokens": 1,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
                });
                vec![
                    anthropic_event("message_start", json!({"type": "message_start", "message": message})),
                    anthropic_event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    ),
                    anthropic_event("ping", json!({"type": "ping"})),
                ]
            }
        }
    }

    /// The event carrying token `i`.
    pub fn token_event(&self, i: u64) -> Event {
        let text = token_text(i);
        match self.shape {
            ApiShape::Openai => self.openai_chunk(json!({"content": text}), Value::Null),
            ApiShape::Anthropic => anthropic_event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            ),
        }
    }

    /// The events after the last token, with the final usage.
    pub fn end_events(&self, usage: ProviderUsage) -> Vec<Event> {
        match self.shape {
            ApiShape::Openai => {
                let mut events = vec![self.openai_chunk(json!({}), json!(self.stop_reason()))];
                if self.include_usage {
                    let mut chunk = self.openai_chunk_value(Value::Null, Value::Null);
                    chunk["choices"] = json!([]);
                    chunk["usage"] = openai_usage(usage);
                    events.push(Event::default().data(chunk.to_string()));
                }
                events.push(Event::default().data("[DONE]"));
                events
            }
            ApiShape::Anthropic => vec![
                anthropic_event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                anthropic_event(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": self.stop_reason(), "stop_sequence": null},
                           "usage": {"output_tokens": usage.output_tokens}}),
                ),
                anthropic_event("message_stop", json!({"type": "message_stop"})),
            ],
        }
    }

    fn openai_chunk(&self, delta: Value, finish_reason: Value) -> Event {
        Event::default().data(self.openai_chunk_value(delta, finish_reason).to_string())
    }

    fn openai_chunk_value(&self, delta: Value, finish_reason: Value) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        });
        // With include_usage OpenAI puts `"usage": null` on every chunk but the last.
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }
}

fn openai_usage(usage: ProviderUsage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

fn anthropic_usage(usage: ProviderUsage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

fn anthropic_event(name: &str, data: Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: ProviderUsage = ProviderUsage { input_tokens: 7, output_tokens: 3 };

    #[test]
    fn filler_has_a_word_per_token_and_matches_the_deltas() {
        assert_eq!(filler(3), "lorem ipsum dolor");
        assert_eq!(filler(40).split(' ').count(), 40);
        assert_eq!(filler(0), "");
        assert_eq!((0..5).map(token_text).collect::<String>(), filler(5));
    }

    #[test]
    fn plain_bodies_carry_usage_in_each_shape() {
        let openai = Reply::new(ApiShape::Openai, 1, "gpt-4o", 7, true).body(USAGE);
        assert_eq!(openai["usage"]["total_tokens"], 10);
        assert_eq!(openai["choices"][0]["finish_reason"], "length");
        assert_eq!(openai["choices"][0]["message"]["content"], "lorem ipsum dolor");
        let anthropic = Reply::new(ApiShape::Anthropic, 1, "claude", 7, false).body(USAGE);
        assert_eq!(anthropic["usage"]["output_tokens"], 3);
        assert_eq!(anthropic["stop_reason"], "end_turn");
        assert!(anthropic["id"].as_str().unwrap().starts_with("msg_"));
    }
}
