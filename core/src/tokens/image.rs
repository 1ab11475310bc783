//! Image input tokens by OpenAI's tile formula.
//!
//! Source: OpenAI's vision guide ("Calculating costs", images-vision). Low
//! detail costs the base tokens. High detail: scale the image to fit within
//! 2048 x 2048, then scale it down so its shortest side is 768 px, count the
//! 512 px tiles that cover it, and charge `base + tile * tiles`. The
//! constants per model are the guide's:
//!
//! | models | base | per tile |
//! | --- | --- | --- |
//! | gpt-4o, gpt-4.1, gpt-4.5, gpt-4 turbo (default) | 85 | 170 |
//! | gpt-4o-mini | 2833 | 5667 |
//! | o1, o1-pro, o3 | 75 | 150 |
//! | computer-use-preview | 65 | 129 |
//!
//! Images are only ever scaled down: a small image is not enlarged to 768 px,
//! which matches the guide's examples and the common implementations. The
//! patch-based formula of gpt-4.1-mini, gpt-4.1-nano and o4-mini is not
//! modelled yet; those models get the default tile constants.

use super::chat::ImageDetail;

/// Base and per-tile tokens for `model`.
fn tile_constants(model: &str) -> (u64, u64) {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    if name.starts_with("gpt-4o-mini") {
        (2833, 5667)
    } else if name.starts_with("computer-use") {
        (65, 129)
    } else if ["o1", "o3"].iter().any(|p| name.starts_with(p)) && !name.starts_with("o3-mini") {
        (75, 150)
    } else {
        (85, 170)
    }
}

/// Prompt tokens for one image of `width` x `height` pixels sent to `model`.
///
/// [`ImageDetail::Auto`] is charged as high detail: the API may choose
/// either, and a rate limiter must not under-reserve. A zero-sized image is
/// charged the base tokens.
pub fn image_tokens(model: &str, width: u32, height: u32, detail: ImageDetail) -> u64 {
    let (base, per_tile) = tile_constants(model);
    if detail == ImageDetail::Low || width == 0 || height == 0 {
        return base;
    }
    let (w, h) = scaled(u64::from(width), u64::from(height));
    let tiles = w.div_ceil(512) * h.div_ceil(512);
    base + per_tile * tiles
}

/// The high-detail resize: fit in 2048 x 2048, then shortest side to 768.
/// Integer floors, as the reference implementations truncate.
fn scaled(mut w: u64, mut h: u64) -> (u64, u64) {
    let longest = w.max(h);
    if longest > 2048 {
        w = (w * 2048 / longest).max(1);
        h = (h * 2048 / longest).max(1);
    }
    let shortest = w.min(h);
    if shortest > 768 {
        w = (w * 768 / shortest).max(1);
        h = (h * 768 / shortest).max(1);
    }
    (w, h)
}
