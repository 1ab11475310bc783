//! The one place where llmgov's errors become JavaScript exceptions.
//!
//! Every core [`llmgov::Error`] becomes an instance of the matching
//! `LlmgovError` subclass (`ts/errors.ts`), carrying the stable
//! [`llmgov::Error::code`] as `code` and the variant's fields as camelCase
//! properties. The JavaScript layer registers one factory at load
//! ([`register_error_factory`]); this file builds the code, message and data,
//! and the factory only picks the class by code, so the mapping lives here.
//!
//! Bad arguments found by the binding itself (a negative token count, NaN, a
//! number past 2^53) are the core's own `invalid_request`, naming the field
//! and the value, so callers see one error vocabulary.

use llmgov::Error;
use napi::bindgen_prelude::{FnArgs, FunctionRef, JsObjectValue, JsValue, Object, Unknown};
use napi::{Env, Status};
use napi_derive::napi;

/// The factory the JavaScript layer registers: `(code, message) => Error`,
/// an instance of the `LlmgovError` subclass for `code`.
type Factory = FunctionRef<FnArgs<(String, String)>, Unknown<'static>>;

/// Where the factory is kept: per JavaScript environment (main thread and each
/// worker load the addon separately).
struct Registered(Factory);

/// Registers the function that turns `(code, message)` into an
/// `LlmgovError` subclass instance, whose fields `throw` then sets. Called once by the package's entry point.
#[napi(ts_args_type = "factory: (code: string, message: string) => Error", catch_unwind)]
pub fn register_error_factory(env: Env, factory: Factory) -> napi::Result<()> {
    env.set_instance_data(Registered(factory), (), |_| {})
}

/// Turns a core error into a thrown JavaScript exception; returns the
/// [`napi::Error`] that tells napi the exception is already pending.
pub fn throw(env: &Env, error: Error) -> napi::Error {
    let message = message_of(&error);
    match build(env, &error, &message) {
        Ok(()) => napi::Error::new(Status::PendingException, message),
        // Building the object failed (the environment is tearing down): a
        // plain error with the code in its status is the best left to give.
        Err(_) => napi::Error::new(Status::GenericFailure, format!("[{}] {message}", error.code())),
    }
}

/// Shorthand for `Result<T, llmgov::Error>` → `napi::Result<T>` with [`throw`].
pub trait OrThrow<T> {
    /// Throws the core error as its `LlmgovError` subclass.
    fn or_throw(self, env: &Env) -> napi::Result<T>;
}

impl<T> OrThrow<T> for llmgov::Result<T> {
    #[inline]
    fn or_throw(self, env: &Env) -> napi::Result<T> {
        self.map_err(|e| throw(env, e))
    }
}

/// A binding-level bad argument, as the core's `invalid_request`.
pub fn invalid(field: &'static str, value: impl ToString, reason: impl Into<String>) -> Error {
    Error::InvalidRequest { field, value: value.to_string(), reason: reason.into() }
}

fn build(env: &Env, error: &Error, message: &str) -> napi::Result<()> {
    let exception = error_object(env, error.code(), message, |data| fill(data, error))?;
    env.throw(exception)
}

/// The `LlmgovError` subclass instance for `code`, its fields set by `fields`.
pub(crate) fn error_object<'env>(
    env: &'env Env,
    code: &str,
    message: &str,
    fields: impl FnOnce(&mut Object) -> napi::Result<()>,
) -> napi::Result<Object<'env>> {
    let mut exception = match env.get_instance_data::<Registered>()? {
        Some(Registered(factory)) => {
            factory.borrow_back(env)?.call((code.to_owned(), message.to_owned()).into())?.coerce_to_object()?
        }
        // The raw addon used without the package's entry point: still an
        // Error with the code and fields, just not a subclass.
        None => {
            let mut plain = env.create_error(napi::Error::new(Status::GenericFailure, message))?;
            plain.set_named_property("code", code)?;
            plain
        }
    };
    fields(&mut exception)?;
    Ok(exception)
}

/// The message of a core error, the field named as JavaScript wrote it.
pub(crate) fn message_of(error: &Error) -> String {
    match error {
        Error::InvalidRequest { field, value, reason } => {
            format!("invalid request: `{}` = `{value}`: {reason}", to_camel(field))
        }
        other => other.to_string(),
    }
}

/// Sets the variant's fields on `data`, camelCased. Times are whole
/// milliseconds, rounded up as `llmgov::ceil_ms` does, so waiting that long
/// always suffices.
pub(crate) fn fill(data: &mut Object, error: &Error) -> napi::Result<()> {
    match error {
        Error::RateLimited { scope, dimension, retry_after, .. } => {
            data.set_named_property("scope", &**scope)?;
            data.set_named_property("dimension", dimension.as_str())?;
            data.set_named_property("retryAfterMs", retry_after.map(|d| llmgov::ceil_ms(d) as f64))?;
            data.set_named_property("gatewayDecision", "rejected_locally")?;
        }
        Error::CircuitOpen { scope, retry_after, .. } => {
            data.set_named_property("scope", &**scope)?;
            data.set_named_property("retryAfterMs", llmgov::ceil_ms(*retry_after) as f64)?;
        }
        Error::NeverFits { scope, dimension, cost, burst, .. } => {
            data.set_named_property("scope", &**scope)?;
            data.set_named_property("dimension", dimension.as_str())?;
            data.set_named_property("cost", *cost as f64)?;
            data.set_named_property("burst", *burst as f64)?;
        }
        Error::InvalidConfig { field, value, reason } => {
            data.set_named_property("field", field.as_str())?;
            data.set_named_property("value", value.as_str())?;
            data.set_named_property("reason", reason.as_str())?;
        }
        Error::InvalidPath { path, reason } => {
            data.set_named_property("path", path.as_str())?;
            data.set_named_property("reason", reason.as_str())?;
        }
        Error::UnknownScope { path } => data.set_named_property("path", path.as_str())?,
        Error::UnknownPreset { name, known } => {
            // `preset`, not `name`: an Error's `name` is its class name.
            data.set_named_property("preset", name.as_str())?;
            let known: Vec<&str> = known.split(',').map(str::trim).collect();
            data.set_named_property("known", known)?;
        }
        Error::InvalidRequest { field, value, reason } => {
            data.set_named_property("field", to_camel(field))?;
            data.set_named_property("value", value.as_str())?;
            data.set_named_property("reason", reason.as_str())?;
        }
        Error::PermitFinished { state } => data.set_named_property("state", state.to_string())?,
        Error::DeadlineExceeded { waited, retry_after, .. } => {
            data.set_named_property("waitedMs", llmgov::ceil_ms(*waited) as f64)?;
            data.set_named_property("retryAfterMs", retry_after.map(|d| llmgov::ceil_ms(d) as f64))?;
        }
        Error::QueueFull { class, bound, retry_after, .. } => {
            data.set_named_property("klass", &**class)?;
            data.set_named_property("bound", *bound as f64)?;
            data.set_named_property("retryAfterMs", retry_after.map(|d| llmgov::ceil_ms(d) as f64))?;
        }
        // PermitExpired has no fields; the enum is non-exhaustive, and a
        // variant added to the core later still arrives with its code and
        // message (LlmgovError), never as a crash.
        _ => {}
    }
    Ok(())
}

/// `max_output_tokens` → `maxOutputTokens`: the name the JavaScript caller wrote.
pub fn to_camel(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut upper = false;
    for c in field.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// A Redis governor's error (`llmgov-redis`) as its `LlmgovError` subclass:
/// the core's errors it passes through as [`throw`] maps them, its own
/// denials with the same fields as the core's.
fn redis_error_object<'env>(env: &'env Env, error: &llmgov_redis::Error) -> napi::Result<Object<'env>> {
    if let llmgov_redis::Error::Core(core) = error {
        return error_object(env, core.code(), &message_of(core), |data| fill(data, core));
    }
    error_object(env, error.code(), &error.to_string(), |data| fill_redis(data, error))
}

fn fill_redis(data: &mut Object, error: &llmgov_redis::Error) -> napi::Result<()> {
    use llmgov_redis::Error as Redis;
    let ms = |d: Option<std::time::Duration>| d.map(|d| llmgov::ceil_ms(d) as f64);
    match error {
        Redis::RateLimited { scope, dimension, retry_after } => {
            data.set_named_property("scope", &**scope)?;
            data.set_named_property("dimension", dimension.as_str())?;
            data.set_named_property("retryAfterMs", ms(*retry_after))?;
            data.set_named_property("gatewayDecision", "rejected_locally")?;
        }
        Redis::NeverFits { scope, dimension, cost, burst } => {
            data.set_named_property("scope", &**scope)?;
            data.set_named_property("dimension", dimension.as_str())?;
            data.set_named_property("cost", *cost as f64)?;
            data.set_named_property("burst", *burst as f64)?;
        }
        Redis::InvalidConfig { field, value, reason } => {
            data.set_named_property("field", field.as_str())?;
            data.set_named_property("value", value.as_str())?;
            data.set_named_property("reason", reason.as_str())?;
        }
        Redis::DeadlineExceeded { waited, retry_after } => {
            data.set_named_property("waitedMs", llmgov::ceil_ms(*waited) as f64)?;
            data.set_named_property("retryAfterMs", ms(*retry_after))?;
        }
        // AlreadyReconciled has no fields; Core is mapped above.
        _ => {}
    }
    Ok(())
}

/// Throws a Redis governor's error (see [`redis_error_object`]), as [`throw`] does.
pub fn throw_redis(env: &Env, error: llmgov_redis::Error) -> napi::Error {
    match redis_error_object(env, &error).and_then(|exception| env.throw(exception)) {
        Ok(()) => napi::Error::new(Status::PendingException, error.to_string()),
        Err(_) => napi::Error::new(Status::GenericFailure, format!("[{}] {error}", error.code())),
    }
}

/// The error a Promise of a Redis call rejects with: napi hands the object
/// it holds to the rejection unchanged.
pub fn reject_redis(env: &Env, error: llmgov_redis::Error) -> napi::Error {
    match redis_error_object(env, &error) {
        Ok(exception) => napi::Error::from(exception.to_unknown()),
        Err(_) => napi::Error::new(Status::GenericFailure, format!("[{}] {error}", error.code())),
    }
}
