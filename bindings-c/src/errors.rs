//! The one place where failures become `llmgov_result` codes: the core's
//! [`Error`] (codes mirror [`Error::code`]), the binding's own argument
//! errors, and caught panics. The last failure of each thread is kept here,
//! for `llmgov_last_error`.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use llmgov_core::{ceil_ms, Error};
use llmgov_redis::Error as RedisError;

use crate::dimension::llmgov_dimension;

/// The outcome of every fallible call: `LLMGOV_RESULT_OK` (0), or why it
/// failed. The numbers are stable: new codes are only ever added.
///
/// 1 to 99 mirror the core's error codes (`llmgov_result_code` gives the
/// same text as the Rust `Error::code()`); 100 and up are this binding's
/// own (bad arguments, caught panics).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_result {
    /// Success.
    Ok = 0,
    /// Refused for now: the request fits the limit but not yet; nothing was
    /// reserved. `llmgov_last_error` names the scope, the dimension and the
    /// earliest time it could pass.
    RateLimited = 1,
    /// Refused for good: the request costs more than a limit can ever hold.
    NeverFits = 2,
    /// A configuration field is wrong; nothing was built.
    InvalidConfig = 3,
    /// A scope path is malformed.
    InvalidPath = 4,
    /// No configured scope or template covers the path.
    UnknownScope = 5,
    /// No preset has this name.
    UnknownPreset = 6,
    /// A request field is out of range (or a route or scope id is not this
    /// governor's).
    InvalidRequest = 7,
    /// The permit was already settled or cancelled.
    PermitFinished = 8,
    /// The permit outlived its TTL and was charged as estimated.
    PermitExpired = 9,
    /// A waiting request was not admitted within its deadline (its own,
    /// its class's maximum wait, or the timeout); nothing is reserved.
    DeadlineExceeded = 10,
    /// The request's class already has as many waiters as its queue bound.
    QueueFull = 11,
    /// A provider scope's circuit breaker is open after consecutive
    /// failures; nothing was reserved. `llmgov_last_error` names the scope
    /// and when the next probe may go.
    CircuitOpen = 12,
    /// A required pointer argument was NULL.
    NullArgument = 100,
    /// A string argument was not valid UTF-8.
    InvalidUtf8 = 101,
    /// An argument is out of its domain (an unknown enum value, a length
    /// larger than any array can be).
    InvalidArgument = 102,
    /// The library panicked; the call had no effect that can be relied on.
    /// Please report it.
    Panic = 103,
    /// The wait was cancelled through its `llmgov_cancel_token`; nothing
    /// was reserved.
    Cancelled = 104,
    /// The core failed with an error newer than this binding; its code is
    /// in `llmgov_last_error`.
    UnknownError = 199,
}

impl llmgov_result {
    /// The stable text code, equal to the core's `Error::code()` where the
    /// core has one.
    fn code(self) -> &'static CStr {
        match self {
            llmgov_result::Ok => c"ok",
            llmgov_result::RateLimited => c"rate_limited",
            llmgov_result::NeverFits => c"never_fits",
            llmgov_result::InvalidConfig => c"invalid_config",
            llmgov_result::InvalidPath => c"invalid_path",
            llmgov_result::UnknownScope => c"unknown_scope",
            llmgov_result::UnknownPreset => c"unknown_preset",
            llmgov_result::InvalidRequest => c"invalid_request",
            llmgov_result::PermitFinished => c"permit_finished",
            llmgov_result::PermitExpired => c"permit_expired",
            llmgov_result::DeadlineExceeded => c"deadline_exceeded",
            llmgov_result::QueueFull => c"queue_full",
            llmgov_result::CircuitOpen => c"circuit_open",
            llmgov_result::NullArgument => c"null_argument",
            llmgov_result::InvalidUtf8 => c"invalid_utf8",
            llmgov_result::InvalidArgument => c"invalid_argument",
            llmgov_result::Panic => c"panic",
            llmgov_result::Cancelled => c"cancelled",
            llmgov_result::UnknownError => c"unknown_error",
        }
    }

    fn message(self) -> &'static CStr {
        match self {
            llmgov_result::Ok => c"success",
            llmgov_result::RateLimited => {
                c"rate limited: the request fits the limit, but not now; retry after the time given"
            }
            llmgov_result::NeverFits => c"the request costs more than a limit can ever hold; waiting cannot help",
            llmgov_result::InvalidConfig => c"invalid configuration",
            llmgov_result::InvalidPath => c"invalid scope path",
            llmgov_result::UnknownScope => c"unknown scope: no configured scope or template matches the path",
            llmgov_result::UnknownPreset => c"unknown preset",
            llmgov_result::InvalidRequest => c"invalid request: a field is out of range",
            llmgov_result::PermitFinished => c"the permit was already settled or cancelled",
            llmgov_result::PermitExpired => {
                c"the permit expired: it was charged as estimated and can no longer be settled"
            }
            llmgov_result::DeadlineExceeded => {
                c"the request was not admitted within its deadline; nothing was reserved"
            }
            llmgov_result::QueueFull => c"the request's traffic class has a full queue; nothing was reserved",
            llmgov_result::CircuitOpen => c"a provider's circuit breaker is open; nothing was reserved",
            llmgov_result::NullArgument => c"a required pointer argument was NULL",
            llmgov_result::InvalidUtf8 => c"a string argument is not valid UTF-8",
            llmgov_result::InvalidArgument => c"an argument is out of its domain",
            llmgov_result::Panic => c"internal error: llmgov panicked (please report it)",
            llmgov_result::Cancelled => c"the wait was cancelled; nothing was reserved",
            llmgov_result::UnknownError => c"an error this version of the C binding does not know",
        }
    }

    /// The code whose number is `n`, if any.
    fn from_number(n: u32) -> Option<Self> {
        use llmgov_result::*;
        [
            Ok,
            RateLimited,
            NeverFits,
            InvalidConfig,
            InvalidPath,
            UnknownScope,
            UnknownPreset,
            InvalidRequest,
            PermitFinished,
            PermitExpired,
            DeadlineExceeded,
            QueueFull,
            CircuitOpen,
            NullArgument,
            InvalidUtf8,
            InvalidArgument,
            Panic,
            Cancelled,
            UnknownError,
        ]
        .into_iter()
        .find(|r| *r as u32 == n)
    }
}

/// What the last failed call on this thread said, as `llmgov_last_error`
/// fills it. Strings are NUL-terminated UTF-8, or NULL where the error has
/// no such part.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct llmgov_error {
    /// The result the call returned (`LLMGOV_RESULT_OK` if no call on this
    /// thread has failed yet).
    pub result: llmgov_result,
    /// The stable text code (`"rate_limited"`, `"invalid_config"`, …). For
    /// `LLMGOV_RESULT_UNKNOWN_ERROR`, the core's own code.
    pub code: *const c_char,
    /// The whole message, naming the field and the value where there are
    /// some.
    pub message: *const c_char,
    /// The scope that refused (rate_limited, never_fits, circuit_open) or
    /// the path at fault (invalid_path, unknown_scope); NULL otherwise.
    pub scope: *const c_char,
    /// The field or argument at fault (invalid_config, invalid_request, and
    /// the binding's argument errors: `"paths[1]"`, `"out_permit"`;
    /// `"class"` for queue_full); NULL otherwise.
    pub field: *const c_char,
    /// The offending value as given; NULL where there is none.
    pub value: *const c_char,
    /// The limit's dimension (rate_limited, never_fits), else
    /// `LLMGOV_DIMENSION_NONE`.
    pub dimension: llmgov_dimension,
    /// Whether `retry_after_*` hold a time: for rate_limited, true when the
    /// refusal waits on time, false when it waits on a release
    /// (concurrency); for deadline_exceeded and queue_full, whether a wait
    /// was predicted (retrying sooner is futile); for circuit_open, always
    /// (when the next probe may go).
    pub has_retry_after: bool,
    /// The earliest time from now the limit could pass, in nanoseconds.
    pub retry_after_ns: u64,
    /// The same, rounded up to whole milliseconds (waiting that long always
    /// suffices).
    pub retry_after_ms: u64,
    /// never_fits: what the request costs on the limit.
    pub cost: u64,
    /// never_fits: the most the limit can ever hold.
    pub burst: u64,
    /// deadline_exceeded: how long the request waited, in nanoseconds (0
    /// when refused at once).
    pub waited_ns: u64,
}

/// Why a call failed, before it becomes a code.
#[derive(Debug)]
pub(crate) enum Failure {
    Core(Error),
    /// The Redis backend's own refusals (`llmgov_redis_*`); its wrapped
    /// core errors become `Core`.
    Redis(RedisError),
    /// The binding's own: a bad argument, or a caught panic.
    Binding {
        result: llmgov_result,
        field: String,
        value: Option<String>,
        reason: String,
    },
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Core(e)
    }
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        match e {
            RedisError::Core(core) => Failure::Core(core),
            other => Failure::Redis(other),
        }
    }
}

/// What every entry point computes: a value, or why not.
pub(crate) type Outcome<T = ()> = Result<T, Failure>;

impl Failure {
    pub(crate) fn null(field: &str) -> Self {
        Failure::Binding {
            result: llmgov_result::NullArgument,
            field: field.to_owned(),
            value: None,
            reason: "must not be NULL".to_owned(),
        }
    }

    pub(crate) fn utf8(field: &str, bytes: &[u8], error: std::str::Utf8Error) -> Self {
        Failure::Binding {
            result: llmgov_result::InvalidUtf8,
            field: field.to_owned(),
            value: Some(shortened(&String::from_utf8_lossy(bytes))),
            reason: format!("not valid UTF-8: {error}"),
        }
    }

    pub(crate) fn argument(field: &str, value: impl ToString, reason: impl Into<String>) -> Self {
        Failure::Binding {
            result: llmgov_result::InvalidArgument,
            field: field.to_owned(),
            value: Some(value.to_string()),
            reason: reason.into(),
        }
    }

    fn panic(payload: Box<dyn Any + Send>) -> Self {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Failure::Binding { result: llmgov_result::Panic, field: String::new(), value: None, reason: what }
    }

    fn result(&self) -> llmgov_result {
        match self {
            Failure::Core(e) => core_result(e),
            // The same numbers as the core's refusals; a permit reconciled
            // twice is the core's "permit finished".
            Failure::Redis(e) => match e {
                RedisError::RateLimited { .. } => llmgov_result::RateLimited,
                RedisError::NeverFits { .. } => llmgov_result::NeverFits,
                RedisError::InvalidConfig { .. } => llmgov_result::InvalidConfig,
                RedisError::DeadlineExceeded { .. } => llmgov_result::DeadlineExceeded,
                RedisError::AlreadyReconciled => llmgov_result::PermitFinished,
                RedisError::Core(core) => core_result(core),
            },
            Failure::Binding { result, .. } => *result,
        }
    }

    fn render(&self) -> Rendered {
        let text = |s: &str| Some(c_string(s));
        let mut r = Rendered {
            code: match self {
                Failure::Core(e) => c_string(e.code()),
                Failure::Redis(RedisError::Core(e)) => c_string(e.code()),
                // `already_reconciled` reads as `permit_finished`, its result's code.
                Failure::Redis(_) => self.result().code().to_owned(),
                Failure::Binding { result, .. } => result.code().to_owned(),
            },
            message: c_string(&self.to_string()),
            scope: None,
            field: None,
            value: None,
            dimension: llmgov_dimension::None,
            retry_after_ns: None,
            cost: 0,
            burst: 0,
            waited_ns: 0,
        };
        let nanos = |d: &std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match self {
            Failure::Core(Error::RateLimited { scope, dimension, retry_after, .. }) => {
                r.scope = text(scope);
                r.dimension = (*dimension).into();
                r.retry_after_ns = Some(retry_after.as_ref().map(nanos));
            }
            Failure::Core(Error::DeadlineExceeded { waited, retry_after, .. }) => {
                r.waited_ns = nanos(waited);
                r.retry_after_ns = Some(retry_after.as_ref().map(nanos));
            }
            Failure::Core(Error::QueueFull { class, retry_after, .. }) => {
                (r.field, r.value) = (text("class"), text(class));
                r.retry_after_ns = Some(retry_after.as_ref().map(nanos));
            }
            Failure::Core(Error::CircuitOpen { scope, retry_after, .. }) => {
                r.scope = text(scope);
                r.retry_after_ns = Some(Some(nanos(retry_after)));
            }
            Failure::Core(Error::NeverFits { scope, dimension, cost, burst, .. }) => {
                (r.scope, r.dimension, r.cost, r.burst) = (text(scope), (*dimension).into(), *cost, *burst);
            }
            Failure::Core(Error::InvalidConfig { field, value, .. }) => (r.field, r.value) = (text(field), text(value)),
            Failure::Core(Error::InvalidRequest { field, value, .. }) => {
                (r.field, r.value) = (text(field), text(value))
            }
            Failure::Core(Error::InvalidPath { path, .. } | Error::UnknownScope { path }) => r.scope = text(path),
            Failure::Core(Error::UnknownPreset { name, .. }) => (r.field, r.value) = (text("preset"), text(name)),
            Failure::Binding { field, value, .. } => {
                r.field = Some(field).filter(|f| !f.is_empty()).map(|f| c_string(f));
                r.value = value.as_deref().map(c_string);
            }
            Failure::Redis(e) => render_redis(e, &mut r),
            Failure::Core(_) => {}
        }
        r
    }
}

/// The result of a core error: the number of its code.
fn core_result(e: &Error) -> llmgov_result {
    match e {
        Error::RateLimited { .. } => llmgov_result::RateLimited,
        Error::NeverFits { .. } => llmgov_result::NeverFits,
        Error::InvalidConfig { .. } => llmgov_result::InvalidConfig,
        Error::InvalidPath { .. } => llmgov_result::InvalidPath,
        Error::UnknownScope { .. } => llmgov_result::UnknownScope,
        Error::UnknownPreset { .. } => llmgov_result::UnknownPreset,
        Error::InvalidRequest { .. } => llmgov_result::InvalidRequest,
        Error::PermitFinished { .. } => llmgov_result::PermitFinished,
        Error::PermitExpired => llmgov_result::PermitExpired,
        Error::DeadlineExceeded { .. } => llmgov_result::DeadlineExceeded,
        Error::QueueFull { .. } => llmgov_result::QueueFull,
        Error::CircuitOpen { .. } => llmgov_result::CircuitOpen,
        _ => llmgov_result::UnknownError,
    }
}

/// The details of the Redis backend's refusals, as of the core's of the same code.
fn render_redis(e: &RedisError, r: &mut Rendered) {
    let text = |s: &str| Some(c_string(s));
    let nanos = |d: &std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    match e {
        RedisError::RateLimited { scope, dimension, retry_after } => {
            r.scope = text(scope);
            r.dimension = (*dimension).into();
            r.retry_after_ns = Some(retry_after.as_ref().map(nanos));
        }
        RedisError::NeverFits { scope, dimension, cost, burst } => {
            (r.scope, r.dimension, r.cost, r.burst) = (text(scope), (*dimension).into(), *cost, *burst);
        }
        RedisError::InvalidConfig { field, value, .. } => (r.field, r.value) = (text(field), text(value)),
        RedisError::DeadlineExceeded { waited, retry_after } => {
            r.waited_ns = nanos(waited);
            r.retry_after_ns = Some(retry_after.as_ref().map(nanos));
        }
        _ => {}
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Core(e) => write!(f, "{e}"),
            Failure::Redis(e) => write!(f, "{e}"),
            Failure::Binding { result: llmgov_result::Panic, reason, .. } => {
                write!(f, "internal error: llmgov panicked: {reason}")
            }
            Failure::Binding { field, value: Some(value), reason, .. } => {
                write!(f, "argument `{field}` = `{value}`: {reason}")
            }
            Failure::Binding { field, value: None, reason, .. } => write!(f, "argument `{field}` {reason}"),
        }
    }
}

/// A C string of `s`; an interior NUL (possible in config values) is
/// written `\0` so the rest of the text survives.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| CString::new(s.replace('\0', "\\0")).expect("no NUL left"))
}

/// At most 200 characters of a value quoted back in an error.
fn shortened(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// A failure's C strings, made when `llmgov_last_error` first asks (a
/// refusal on the hot path costs no formatting).
struct Rendered {
    code: CString,
    message: CString,
    scope: Option<CString>,
    field: Option<CString>,
    value: Option<CString>,
    dimension: llmgov_dimension,
    /// `Some(None)`: a refusal that waits on a release.
    retry_after_ns: Option<Option<u64>>,
    cost: u64,
    burst: u64,
    waited_ns: u64,
}

struct LastError {
    failure: Failure,
    rendered: Option<Rendered>,
}

thread_local! {
    static LAST_ERROR: RefCell<Option<LastError>> = const { RefCell::new(None) };
}

/// Keeps `failure` as this thread's last error and returns its code.
fn record(failure: Failure) -> llmgov_result {
    let result = failure.result();
    // During thread teardown the slot may be gone; the code still stands.
    let _ = LAST_ERROR.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = Some(LastError { failure, rendered: None });
        }
    });
    result
}

/// Runs an entry point's body: its value on success, else the failure kept
/// as this thread's last error; a panic is caught and reported as
/// `LLMGOV_RESULT_PANIC`, never unwound into C. Handles freed inside an
/// event callback the body raised go as it returns.
pub(crate) fn guard(body: impl FnOnce() -> Outcome) -> llmgov_result {
    let result = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => llmgov_result::Ok,
        Ok(Err(failure)) => record(failure),
        Err(payload) => record(Failure::panic(payload)),
    };
    crate::events::drop_freed();
    result
}

/// For the entry points that cannot fail (frees): swallows a panic rather
/// than unwinding into C.
pub(crate) fn guard_infallible(body: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
        record(Failure::panic(payload));
    }
    crate::events::drop_freed();
}

/// The stable text code of a result: `"ok"`, `"rate_limited"`, … (the
/// core's `Error::code()` for 1 to 99), or `"unknown_result"` for a number
/// that is no result.
///
/// # Ownership
/// The string is static: never free it.
#[no_mangle]
pub extern "C" fn llmgov_result_code(result: u32) -> *const c_char {
    llmgov_result::from_number(result).map_or(c"unknown_result", llmgov_result::code).as_ptr()
}

/// A sentence describing any result code, for logs. Details of one failure
/// (the field and value at fault, the scope, the retry time) are in
/// `llmgov_last_error`.
///
/// # Ownership
/// The string is static: never free it.
#[no_mangle]
pub extern "C" fn llmgov_result_message(result: u32) -> *const c_char {
    llmgov_result::from_number(result).map_or(c"not an llmgov_result code", llmgov_result::message).as_ptr()
}

/// Fills `*out` with what the last failed call on this thread said: its
/// result, message, and the scope, field, value, dimension and retry time
/// where it has them. If no call on this thread has failed, `out->result`
/// is `LLMGOV_RESULT_OK` and the strings other than `code` and `message`
/// are NULL.
///
/// Successful calls leave the last error as it was; read it right after the
/// call that failed.
///
/// # Ownership
/// The strings belong to the library and stay valid until the next call
/// into llmgov on this thread; copy them to keep them.
///
/// # Safety
/// `out` must be NULL (an error) or point to writable memory for one
/// `llmgov_error`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_last_error(out: *mut llmgov_error) -> llmgov_result {
    if out.is_null() {
        return record(Failure::null("out"));
    }
    let filled = catch_unwind(AssertUnwindSafe(|| {
        LAST_ERROR.with(|last| {
            let mut last = last.borrow_mut();
            let Some(last) = last.as_mut() else {
                return no_error();
            };
            let result = last.failure.result();
            let r = last.rendered.get_or_insert_with(|| last.failure.render());
            let text = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |s| s.as_ptr());
            let retry_after = r.retry_after_ns.flatten();
            llmgov_error {
                result,
                code: r.code.as_ptr(),
                message: r.message.as_ptr(),
                scope: text(&r.scope),
                field: text(&r.field),
                value: text(&r.value),
                dimension: r.dimension,
                has_retry_after: retry_after.is_some(),
                retry_after_ns: retry_after.unwrap_or(0),
                retry_after_ms: retry_after.map_or(0, |ns| ceil_ms(std::time::Duration::from_nanos(ns))),
                cost: r.cost,
                burst: r.burst,
                waited_ns: r.waited_ns,
            }
        })
    }));
    match filled {
        Ok(error) => {
            // SAFETY: non-NULL, and the caller promises it is writable.
            unsafe { out.write(error) };
            llmgov_result::Ok
        }
        Err(payload) => record(Failure::panic(payload)),
    }
}

fn no_error() -> llmgov_error {
    llmgov_error {
        result: llmgov_result::Ok,
        code: llmgov_result::Ok.code().as_ptr(),
        message: c"no llmgov call has failed on this thread".as_ptr(),
        scope: ptr::null(),
        field: ptr::null(),
        value: ptr::null(),
        dimension: llmgov_dimension::None,
        has_retry_after: false,
        retry_after_ns: 0,
        retry_after_ms: 0,
        cost: 0,
        burst: 0,
        waited_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> (llmgov_result, String, Option<String>) {
        let mut e = std::mem::MaybeUninit::<llmgov_error>::uninit();
        assert_eq!(unsafe { llmgov_last_error(e.as_mut_ptr()) }, llmgov_result::Ok);
        let e = unsafe { e.assume_init() };
        let text = |p: *const c_char| (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned());
        (e.result, text(e.message).unwrap(), text(e.field))
    }

    #[test]
    fn a_panic_becomes_a_result_with_its_message() {
        let result = guard(|| panic!("boom at {}", 42));
        assert_eq!(result, llmgov_result::Panic);
        let (result, message, field) = last();
        assert_eq!(result, llmgov_result::Panic);
        assert_eq!(message, "internal error: llmgov panicked: boom at 42");
        assert_eq!(field, None);
    }

    #[test]
    fn a_panic_in_a_free_is_swallowed_and_recorded() {
        guard_infallible(|| panic!("in drop"));
        assert_eq!(last().0, llmgov_result::Panic);
    }

    #[test]
    fn codes_mirror_the_core_and_every_number_has_one() {
        for n in 0..300 {
            let code = unsafe { CStr::from_ptr(llmgov_result_code(n)) }.to_str().unwrap();
            let message = unsafe { CStr::from_ptr(llmgov_result_message(n)) }.to_str().unwrap();
            assert_eq!(llmgov_result::from_number(n).is_none(), code == "unknown_result", "{n}");
            assert!(!message.is_empty());
        }
        let errors = [
            Error::PermitExpired,
            Error::UnknownScope { path: "x".into() },
            Error::InvalidPath { path: "/".into(), reason: "r".into() },
        ];
        for e in errors {
            let code = e.code();
            let result = Failure::Core(e).result();
            assert_eq!(result.code().to_str().unwrap(), code);
        }
    }

    #[test]
    fn the_redis_backends_refusals_take_the_cores_codes() {
        use llmgov_core::Dimension;
        use std::time::Duration;
        let limited = RedisError::RateLimited { scope: "s".into(), dimension: Dimension::Requests, retry_after: None };
        let cases = [
            (limited, llmgov_result::RateLimited),
            (
                RedisError::DeadlineExceeded { waited: Duration::ZERO, retry_after: None },
                llmgov_result::DeadlineExceeded,
            ),
            (RedisError::AlreadyReconciled, llmgov_result::PermitFinished),
            (RedisError::Core(Error::PermitExpired), llmgov_result::PermitExpired),
        ];
        for (error, expected) in cases {
            assert_eq!(record(Failure::from(error)), expected);
            let mut e = std::mem::MaybeUninit::<llmgov_error>::uninit();
            assert_eq!(unsafe { llmgov_last_error(e.as_mut_ptr()) }, llmgov_result::Ok);
            let code = unsafe { CStr::from_ptr(e.assume_init().code) };
            assert_eq!(code, expected.code(), "the code is the result's, as for the core's errors");
        }
        let (_, message, _) = last();
        assert_eq!(message, "permit expired: it was not settled within its TTL and was charged as estimated");
    }

    #[test]
    fn interior_nul_survives_as_an_escape() {
        assert_eq!(c_string("a\0b").to_str().unwrap(), "a\\0b");
    }
}
