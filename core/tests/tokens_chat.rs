//! Chat overhead, tools and images against OpenAI's published numbers.
//!
//! Sources: the OpenAI cookbook "How to count tokens with tiktoken" (its
//! example conversations and the `usage.prompt_tokens` the API returned for
//! them) and OpenAI's vision guide, "Calculating costs".

use llmgov::tokens::{self, image_tokens, ChatMessage, ImageDetail, InputCounting, Part};
use serde_json::json;

/// The cookbook's corporate-jargon conversation (section 6).
fn jargon() -> Vec<ChatMessage> {
    vec![
        ChatMessage::text(
            "system",
            "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
        ),
        ChatMessage::text("system", "New synergies will help drive top-line growth.").with_name("example_user"),
        ChatMessage::text("system", "Things working well together will increase revenue.")
            .with_name("example_assistant"),
        ChatMessage::text(
            "system",
            "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
        )
        .with_name("example_user"),
        ChatMessage::text("system", "Let's talk later when we're less busy about how to do better.")
            .with_name("example_assistant"),
        ChatMessage::text(
            "user",
            "This late pivot means we don't have time to boil the ocean for the client deliverable.",
        ),
    ]
}

#[test]
fn cookbook_messages_match_the_api() {
    // The cookbook prints the API's prompt_tokens: 129 for gpt-3.5-turbo(-0613),
    // gpt-4-0613 and gpt-4; 124 for gpt-4o and gpt-4o-mini; 127 for gpt-3.5-turbo-0301.
    let messages = jargon();
    for model in ["gpt-3.5-turbo-0613", "gpt-3.5-turbo", "gpt-4-0613", "gpt-4-0314", "gpt-4"] {
        assert_eq!(tokens::count_chat(model, &messages, &[]), 129, "{model}");
    }
    for model in ["gpt-4o", "gpt-4o-mini", "gpt-4o-2024-08-06"] {
        assert_eq!(tokens::count_chat(model, &messages, &[]), 124, "{model}");
    }
    assert_eq!(tokens::count_chat("gpt-3.5-turbo-0301", &messages, &[]), 127);
}

fn weather_tool() -> serde_json::Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"]
                    }
                },
                "required": ["location"]
            }
        }
    })
}

#[test]
fn cookbook_tools_match_the_api() {
    // Cookbook section 7: 105 prompt tokens for gpt-3.5-turbo and gpt-4, 101 for gpt-4o and gpt-4o-mini.
    let messages = [
        ChatMessage::text("system", "You are a helpful assistant that can answer to questions about the weather."),
        ChatMessage::text("user", "What's the weather like in San Francisco?"),
    ];
    let tools = [weather_tool()];
    for model in ["gpt-3.5-turbo", "gpt-4"] {
        assert_eq!(tokens::count_chat(model, &messages, &tools), 105, "{model}");
    }
    for model in ["gpt-4o", "gpt-4o-mini"] {
        assert_eq!(tokens::count_chat(model, &messages, &tools), 101, "{model}");
    }
    // The bare function object counts the same as the wrapped one.
    let bare = [weather_tool()["function"].clone()];
    assert_eq!(tokens::count_chat("gpt-4o", &messages, &bare), 101);
}

#[test]
fn malformed_tools_are_skipped_not_fatal() {
    let messages = [ChatMessage::text("user", "hi")];
    let plain = tokens::count_chat("gpt-4o", &messages, &[]);
    let junk = [json!(null), json!(42), json!({"function": {"description": 7}}), json!("tool")];
    assert_eq!(tokens::count_chat("gpt-4o", &messages, &junk), plain);
    // Deeply nested schemas are bounded, not recursed without end.
    let mut schema = json!({"type": "string", "description": "leaf"});
    for _ in 0..200 {
        schema = json!({"type": "object", "description": "level", "properties": {"inner": schema}});
    }
    let deep = [json!({"name": "deep", "description": "d", "parameters": {"properties": {"root": schema}}})];
    assert!(tokens::count_chat("gpt-4o", &messages, &deep) > plain);
}

#[test]
fn vision_guide_examples() {
    assert_eq!(image_tokens("gpt-4o", 1024, 1024, ImageDetail::High), 765);
    assert_eq!(image_tokens("gpt-4o", 2048, 4096, ImageDetail::High), 1105);
    assert_eq!(image_tokens("gpt-4o", 4096, 8192, ImageDetail::Low), 85);
    // Auto is charged as high detail.
    assert_eq!(image_tokens("gpt-4o", 1024, 1024, ImageDetail::Auto), 765);
    // Small images are not enlarged: one tile.
    assert_eq!(image_tokens("gpt-4.1", 512, 512, ImageDetail::High), 255);
    // gpt-4o-mini: base 2833, 5667 per tile (same dollar price as gpt-4o).
    assert_eq!(image_tokens("gpt-4o-mini", 4096, 8192, ImageDetail::Low), 2833);
    assert_eq!(image_tokens("gpt-4o-mini", 1024, 1024, ImageDetail::High), 2833 + 4 * 5667);
    // o1 / o3: base 75, 150 per tile.
    assert_eq!(image_tokens("o1", 1024, 1024, ImageDetail::High), 75 + 4 * 150);
    // Degenerate and huge sizes neither panic nor overflow.
    assert_eq!(image_tokens("gpt-4o", 0, 100, ImageDetail::High), 85);
    assert_eq!(image_tokens("gpt-4o", u32::MAX, 1, ImageDetail::High), 85 + 170 * 4);
    assert!(image_tokens("gpt-4o", u32::MAX, u32::MAX, ImageDetail::High) <= 85 + 170 * 16);
}

#[test]
fn patch_metered_models_follow_the_patch_formula() {
    // The vision guide's patch examples: 1024 x 1024 is 1024 patches; 1800 x
    // 2400 is scaled to 1056 x 1408, 33 x 44 = 1452 patches; then each
    // model's multiplier, rounded up. The tile formula (765 for both) would
    // under-reserve gpt-4.1-mini two to three times.
    assert_eq!(image_tokens("gpt-4.1-mini", 1024, 1024, ImageDetail::High), 1659);
    assert_eq!(image_tokens("gpt-4.1-mini", 1800, 2400, ImageDetail::High), 2353);
    assert_eq!(image_tokens("gpt-4.1-nano-2025-04-14", 1024, 1024, ImageDetail::High), 2520);
    assert_eq!(image_tokens("o4-mini", 1024, 1024, ImageDetail::Auto), 1762);
    assert_eq!(image_tokens("openai/gpt-5-mini", 1024, 1024, ImageDetail::High), 1659);
    assert_eq!(image_tokens("gpt-5-nano", 1024, 1024, ImageDetail::High), 2520);
    // No `detail` for these models: low costs the same.
    assert_eq!(image_tokens("gpt-4.1-mini", 1024, 1024, ImageDetail::Low), 1659);
    // At most 1536 patches, whatever the size.
    for (w, h) in [(0, 0), (1, 1), (u32::MAX, 1), (1, u32::MAX), (u32::MAX, u32::MAX), (4096, 4096)] {
        let tokens = image_tokens("gpt-4.1-nano", w, h, ImageDetail::High);
        assert!((1..=(1536.0f64 * 2.46).ceil() as u64).contains(&tokens), "{w} x {h}: {tokens}");
    }
    // gpt-4.1 itself stays on tiles.
    assert_eq!(image_tokens("gpt-4.1", 1024, 1024, ImageDetail::High), 765);
}

#[test]
fn images_add_to_messages() {
    let text_only = [ChatMessage::text("user", "What is in this image?")];
    let mut with_image = text_only.clone();
    with_image[0].content.push(Part::Image { width: 1024, height: 1024, detail: ImageDetail::High });
    assert_eq!(tokens::count_chat("gpt-4o", &with_image, &[]), tokens::count_chat("gpt-4o", &text_only, &[]) + 765);
}

#[test]
fn fast_mode_is_close_on_chat() {
    let messages = jargon();
    let exact = InputCounting::Exact.count_chat("gpt-4o", &messages, &[]) as f64;
    let fast = InputCounting::Fast.count_chat("gpt-4o", &messages, &[]) as f64;
    assert!((fast - exact).abs() / exact < 0.15, "fast {fast} vs exact {exact}");
}
