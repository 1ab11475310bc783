//! Strings the library hands out (JSON documents, Prometheus text), and
//! their free.

use std::ffi::{c_char, CString};

use crate::args::Out;
use crate::errors::{c_string, guard_infallible, Failure, Outcome};

/// Hands `value` out as a NUL-terminated JSON string the caller frees with
/// `llmgov_string_free`.
pub(crate) fn write_json(out: Out<*mut c_char>, value: &impl serde::Serialize) -> Outcome {
    let json = serde_json::to_string(value).map_err(|e| Failure::argument("json", "", e.to_string()))?;
    // JSON escapes NUL as \u0000, so there is none in the text.
    let json = CString::new(json).map_err(|e| Failure::argument("json", "", e.to_string()))?;
    out.write(json.into_raw());
    Ok(())
}

/// Hands `text` out as a NUL-terminated string the caller frees with
/// `llmgov_string_free`; an interior NUL (none in the texts llmgov makes)
/// is escaped rather than cutting the text short.
pub(crate) fn write_text(out: Out<*mut c_char>, text: &str) -> Outcome {
    out.write(c_string(text).into_raw());
    Ok(())
}

/// Frees a string llmgov returned (the `*_json` functions,
/// `llmgov_governor_prometheus`). NULL does nothing.
///
/// # Safety
/// `string` must be NULL or a string from llmgov not freed yet, and not
/// used after. Freeing a string from elsewhere, or twice, is undefined
/// behaviour.
#[no_mangle]
pub unsafe extern "C" fn llmgov_string_free(string: *mut c_char) {
    guard_infallible(|| {
        if !string.is_null() {
            // SAFETY: made by CString::into_raw in `write_json` or `write_text`.
            drop(unsafe { CString::from_raw(string) });
        }
    })
}
