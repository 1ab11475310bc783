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

/// A number as a person would write it: `1e300` and `1e-300` rather than
/// their hundreds of digits, other values as Rust prints them (`60.5`, `-3`).
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && magnitude.is_finite() && !(1e-6..1e15).contains(&magnitude) {
        format!("{value:e}")
    } else {
        value.to_string()
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
        let span = e.span().unwrap_or(0..0);
        CliError::field(syntax_field(text, span.start), &text[span], e.message())
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        // toml appends "in `path`" lines to its messages: the path is already
        // in `field`, and its backticks would hide the value.
        let full = e.inner().to_string();
        let reason = full.lines().next().unwrap_or_default().to_owned();
        let quoted = |quote: char| reason.split(quote).nth(1).map(str::to_owned);
        if let Some(missing) = reason.strip_prefix("missing field ").and_then(|_| quoted('`')) {
            // serde names the table ("." at the top) and the field apart.
            let field = if path == "." { missing } else { format!("{path}.{missing}") };
            return CliError::field(field, "", "is required");
        }
        let value = if reason.starts_with("invalid type: string") { quoted('"') } else { quoted('`') };
        CliError::Field { field: path, value: value.unwrap_or_default(), reason }
    })
}

/// Where a TOML syntax error is: the key being set if the error is in its
/// value (`amount` at line 11), else the line and column.
fn syntax_field(text: &str, at: usize) -> String {
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let key = before[line_start..].trim_end().strip_suffix('=').map(|b| {
        let b = b.trim_end();
        let start = b.rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.')).map_or(0, |i| i + 1);
        &b[start..]
    });
    match key {
        Some(key) if !key.is_empty() => format!("{key} (line {line})"),
        _ => format!("line {line}, column {column}"),
    }
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
    fn numbers_far_from_one_are_written_with_an_exponent() {
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(1e-300), "1e-300");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(60.5), "60.5");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn a_missing_field_is_named_with_its_path() {
        let err = parse_toml::<Shape>("kind = \"fixed\"").unwrap_err().to_string();
        assert_eq!(err, "`tokens` = ``: is required");
    }

    #[test]
    fn a_syntax_error_names_the_key_or_the_line() {
        let err = parse_toml::<Shape>("kind = \"fixed\"\ntokens = 18446744073709551615").unwrap_err().to_string();
        assert!(err.starts_with("`tokens (line 2)` = `18446744073709551615`: "), "{err}");
        let err = parse_toml::<Shape>("kind = \"fixed\"\n[oops").unwrap_err().to_string();
        assert!(err.starts_with("`line 2, column "), "{err}");
    }

    #[test]
    fn type_and_variant_errors_name_the_value() {
        let err = parse_toml::<Shape>("tokens = \"lots\"\nkind = \"fixed\"").unwrap_err().to_string();
        assert!(err.starts_with("`tokens` = `lots`"), "{err}");
        let err = parse_toml::<Shape>("tokens = 3\nkind = \"odd\"").unwrap_err().to_string();
        assert!(err.starts_with("`kind` = `odd`"), "{err}");
    }
}
