//! The compiled part of the `llmgov` Python package (`llmgov._llmgov`): a
//! thin PyO3 layer over the core. The public API is the `llmgov` package
//! (`python/llmgov/`); its stubs are `python/llmgov/_llmgov.pyi`.

mod answer;
mod args;
mod config_source;
mod convert;
mod errors;
mod events;
mod feedback;
mod governor;
mod permit;
mod plan;
mod redis;
mod request;
mod routing;
mod tokens;
mod usage;
mod waiting;
mod wake;

use pyo3::prelude::*;

#[pymodule]
fn _llmgov(module: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(module)?;
    module.add_class::<governor::PyGovernor>()?;
    module.add_class::<governor::PyRoute>()?;
    module.add_class::<routing::PyProfile>()?;
    module.add_class::<permit::PyPermit>()?;
    module.add_class::<permit::Ready>()?;
    module.add_class::<waiting::Reservation>()?;
    module.add_class::<wake::Driver>()?;
    module.add_class::<wake::Forget>()?;
    module.add_class::<wake::Acquiring>()?;
    module.add_class::<feedback::PyRetryPolicy>()?;
    module.add_class::<redis::PyRedisGovernor>()?;
    module.add_class::<redis::PyRedisRoute>()?;
    module.add_class::<redis::PyRedisPermit>()?;
    module.add_class::<redis::RedisAttempt>()?;
    module.add_function(wrap_pyfunction!(feedback::classify_response, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::count_tokens, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::count_chat_tokens, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::estimate_tokens, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::estimate_request, module)?)?;
    module.add_function(wrap_pyfunction!(plan::plan_capacity, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
