//! A limit's dimension as C sees it: the enum `llmgov_error` reports, and
//! its name for logs.

use std::ffi::{c_char, CStr};

use llmgov_core::Dimension;

/// A limit's dimension, as `llmgov_error` reports it.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_dimension {
    /// The error names no dimension.
    None = 0,
    /// Requests started in the window.
    Requests = 1,
    /// Prompt tokens in the window.
    InputTokens = 2,
    /// Completion tokens in the window.
    OutputTokens = 3,
    /// Prompt plus completion tokens in the window.
    Tokens = 4,
    /// Requests in flight at once.
    Concurrency = 5,
    /// Money spent in the window (a `cost` budget), in millionths of the
    /// currency the prices are in.
    Cost = 6,
}

impl From<Dimension> for llmgov_dimension {
    fn from(d: Dimension) -> Self {
        match d {
            Dimension::Requests => llmgov_dimension::Requests,
            Dimension::InputTokens => llmgov_dimension::InputTokens,
            Dimension::OutputTokens => llmgov_dimension::OutputTokens,
            Dimension::Tokens => llmgov_dimension::Tokens,
            Dimension::Concurrency => llmgov_dimension::Concurrency,
            Dimension::Cost => llmgov_dimension::Cost,
        }
    }
}

impl llmgov_dimension {
    /// The core's name of the dimension (`"input_tokens"`), or `"none"`.
    fn name(self) -> &'static CStr {
        match self {
            llmgov_dimension::None => c"none",
            llmgov_dimension::Requests => c"requests",
            llmgov_dimension::InputTokens => c"input_tokens",
            llmgov_dimension::OutputTokens => c"output_tokens",
            llmgov_dimension::Tokens => c"tokens",
            llmgov_dimension::Concurrency => c"concurrency",
            llmgov_dimension::Cost => c"cost",
        }
    }

    fn from_number(n: u32) -> Option<Self> {
        use llmgov_dimension::*;
        [None, Requests, InputTokens, OutputTokens, Tokens, Concurrency, Cost].into_iter().find(|d| *d as u32 == n)
    }
}

/// The name of a dimension, as configs spell it (`"input_tokens"`), for
/// messages: `"none"` for `LLMGOV_DIMENSION_NONE`, NULL for a number that
/// is no `llmgov_dimension`.
///
/// # Ownership
/// The string is static: never free it.
#[no_mangle]
pub extern "C" fn llmgov_dimension_name(dimension: u32) -> *const c_char {
    llmgov_dimension::from_number(dimension).map_or(std::ptr::null(), |d| d.name().as_ptr())
}
