//! Image input tokens by OpenAI's published formulas.
//!
//! Source: OpenAI's vision guide ("Calculating costs", images-vision). Two
//! formulas, by model.
//!
//! **Tiles** (most models). Low detail costs the base tokens. High detail:
//! scale the image to fit within 2048 x 2048, then scale it down so its
//! shortest side is 768 px, count the 512 px tiles that cover it, and charge
//! `base + tile * tiles`. The constants per model are the guide's:
//!
//! | models | base | per tile |
//! | --- | --- | --- |
//! | gpt-4o, gpt-4.1, gpt-4.5, gpt-4 turbo (default) | 85 | 170 |
//! | gpt-4o-mini | 2833 | 5667 |
//! | o1, o1-pro, o3 | 75 | 150 |
//! | computer-use-preview | 65 | 129 |
//!
//! Images are only ever scaled down: a small image is not enlarged to 768 px,
//! which matches the guide's examples and the common implementations.
//!
//! **Patches** (gpt-4.1-mini, gpt-4.1-nano, o4-mini, gpt-5-mini,
//! gpt-5-nano). Count the 32 px patches that cover the image; past 1536,
//! scale the image down so that at most 1536 cover it (the guide's two-step
//! ratio); then multiply by the model's factor: 1.62 for gpt-4.1-mini and
//! gpt-5-mini, 2.46 for the nanos, 1.72 for o4-mini. A 1800 x 2400 image is
//! 1452 patches, 2353 tokens on gpt-4.1-mini, where the tile formula would
//! say 765. The guide names no `detail` for these models, so every detail
//! is charged the same.

use super::chat::ImageDetail;

/// How a model charges an image.
enum Formula {
    /// `(base, per tile)`.
    Tiles(u64, u64),
    /// Tokens per 32 px patch, in hundredths.
    Patches(u64),
}

/// Patch-metered models and their multipliers, by name prefix. Checked
/// before the tile models, so `gpt-4.1-mini` never reads as `gpt-4.1`.
/// Multipliers are in hundredths, so the product is exact.
const PATCH_MODELS: &[(&str, u64)] =
    &[("gpt-4.1-mini", 162), ("gpt-4.1-nano", 246), ("o4-mini", 172), ("gpt-5-mini", 162), ("gpt-5-nano", 246)];

/// The formula `model` is charged by.
fn formula(model: &str) -> Formula {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    if let Some(&(_, multiplier)) = PATCH_MODELS.iter().find(|(prefix, _)| name.starts_with(prefix)) {
        Formula::Patches(multiplier)
    } else if name.starts_with("gpt-4o-mini") {
        Formula::Tiles(2833, 5667)
    } else if name.starts_with("computer-use") {
        Formula::Tiles(65, 129)
    } else if ["o1", "o3"].iter().any(|p| name.starts_with(p)) && !name.starts_with("o3-mini") {
        Formula::Tiles(75, 150)
    } else {
        Formula::Tiles(85, 170)
    }
}

/// Prompt tokens for one image of `width` x `height` pixels sent to `model`.
///
/// [`ImageDetail::Auto`] is charged as high detail: the API may choose
/// either, and a rate limiter must not under-reserve. A zero-sized image is
/// charged the least the model charges for any image.
pub fn image_tokens(model: &str, width: u32, height: u32, detail: ImageDetail) -> u64 {
    match formula(model) {
        Formula::Tiles(base, _) if detail == ImageDetail::Low || width == 0 || height == 0 => base,
        Formula::Tiles(base, per_tile) => {
            let (w, h) = scaled(u64::from(width), u64::from(height));
            base + per_tile * w.div_ceil(512) * h.div_ceil(512)
        }
        Formula::Patches(hundredths) => {
            let patches = patches(u64::from(width.max(1)), u64::from(height.max(1)));
            // Rounded up: a limiter must not reserve less than is charged.
            (patches * hundredths).div_ceil(100)
        }
    }
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

/// Most patches an image is charged for.
const MAX_PATCHES: u64 = 1536;
const PATCH: u64 = 32;

/// The 32 px patches covering a `w` x `h` image, after the guide's
/// downscale of images that need more than [`MAX_PATCHES`].
fn patches(w: u64, h: u64) -> u64 {
    let raw = w.div_ceil(PATCH) * h.div_ceil(PATCH);
    if raw <= MAX_PATCHES {
        return raw;
    }
    let (wf, hf) = (w as f64, h as f64);
    let mut ratio = ((PATCH * PATCH * MAX_PATCHES) as f64 / (wf * hf)).sqrt();
    // Shrink further so that a whole number of patches spans the side that
    // needs the most shrinking (the guide's second step).
    let fit = |side: f64| {
        let patches = side * ratio / PATCH as f64;
        patches.floor().max(1.0) / patches
    };
    ratio *= fit(wf).min(fit(hf));
    let side = |length: f64| ((length * ratio).floor() as u64).max(1).div_ceil(PATCH);
    (side(wf) * side(hf)).min(MAX_PATCHES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guides_patch_examples() {
        // 1024 x 1024: 32 x 32 patches, no resize.
        assert_eq!(patches(1024, 1024), 1024);
        // 1800 x 2400: resized to 1056 x 1408, 33 x 44 patches.
        assert_eq!(patches(1800, 2400), 1452);
        assert_eq!(patches(2400, 1800), 1452);
    }

    #[test]
    fn patches_stay_bounded_on_any_shape() {
        for (w, h) in [(u64::from(u32::MAX), 1), (1, u64::from(u32::MAX)), (u64::from(u32::MAX), u64::from(u32::MAX))] {
            let n = patches(w, h);
            assert!((1..=MAX_PATCHES).contains(&n), "{w} x {h}: {n}");
        }
        for w in (1..5000).step_by(37) {
            for h in (1..5000).step_by(41) {
                assert!(patches(w, h) <= MAX_PATCHES, "{w} x {h}");
            }
        }
    }
}
