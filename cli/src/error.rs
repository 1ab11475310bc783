//! Errors of the command and its files: each names the file, the field and
//! the value at fault.

use std::path::PathBuf;

/// What went wrong, for a person to fix.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A field has a bad value.
    #[error("`{field}` = `{value}`: {reason}")]
    Field {
        /// Dotted path of the field.
        field: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be read or parsed; `source` says where in it.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        source: Box<CliError>,
    },
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The core refused something.
    #[error(transparent)]
    Core(#[from] llmgov::Error),
    /// Drawing the plot failed.
    #[error("plot: {0}")]
    Plot(String),
}

impl CliError {
    /// An error naming a field and its value.
    pub fn field(field: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> Self {
        CliError::Field { field: field.into(), value: value.to_string(), reason: reason.into() }
    }

    /// This error, as found in `path`.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Self {
        CliError::File { path: path.into(), source: Box::new(self) }
    }
}

/// Parses a duration such as `"1m"` or `"500ms"` into nanoseconds.
pub fn duration_ns(field: &str, text: &str) -> Result<u64, CliError> {
    let d = humantime::parse_duration(text)
        .map_err(|e| CliError::field(field, text, format!("not a duration ({e}); write e.g. 1s, 1m, 500ms")))?;
    match u64::try_from(d.as_nanos()) {
        Ok(0) => Err(CliError::field(field, text, "must be longer than zero")),
        Ok(ns) => Ok(ns),
        Err(_) => Err(CliError::field(field, text, "too long")),
    }
}

/// Parses TOML into `T`, naming the field and value at fault.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, CliError> {
    let value: toml::Value = toml::from_str(text).map_err(|e| {
        let value = e.span().map(|s| text[s].to_owned()).unwrap_or_default();
        CliError::field("<toml>", value, e.message())
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        // toml appends "in `path`" lines to its messages: the path is already
        // in `field`, and its backticks would hide the value.
        let full = e.inner().to_string();
        let reason = full.lines().next().unwrap_or_default().to_owned();
        let quoted = |quote: char| reason.split(quote).nth(1).map(str::to_owned);
        let value = if reason.starts_with("invalid type: string") { quoted('"') } else { quoted('`') };
        CliError::Field { field, value: value.unwrap_or_default(), reason }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        tokens: u64,
        kind: Kind,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Fixed,
    }

    #[test]
    fn type_and_variant_errors_name_the_value() {
        let err = parse_toml::<Shape>("tokens = \"lots\"\nkind = \"fixed\"").unwrap_err().to_string();
        assert!(err.starts_with("`tokens` = `lots`"), "{err}");
        let err = parse_toml::<Shape>("tokens = 3\nkind = \"odd\"").unwrap_err().to_string();
        assert!(err.starts_with("`kind` = `odd`"), "{err}");
    }
}
