//! A config's TOML text as the JSON value every config is read from.

use serde::Deserialize;

use crate::{Error, Result};

/// Parses TOML `text` into its JSON form, for [`super::Config::from_value`]
/// (or a caller's own sections beside the core's). A syntax error names
/// the text at fault; a non-finite float (`nan`, `inf`, `-inf`) is refused
/// naming its path and the value as written.
pub fn toml_to_value(text: &str) -> Result<serde_json::Value> {
    let toml_error = |e: toml::de::Error| Error::InvalidConfig {
        field: "<toml>".into(),
        value: e.span().map(|s| text[s].to_owned()).unwrap_or_default(),
        reason: e.message().to_owned(),
    };
    // Checked as TOML before it becomes JSON: JSON has no nan or inf, and
    // serde_json turns them into null, which every optional field reads as
    // "left out" (`safety_margin = nan` loaded as the default 1). The raw
    // TOML also holds each float as written.
    let document = toml::de::DeTable::parse(text).map_err(toml_error)?;
    refuse_non_finite(&mut String::new(), document.get_ref())?;
    serde_json::Value::deserialize(toml::de::Deserializer::from(document)).map_err(toml_error)
}

/// Refuses a non-finite float (TOML's `nan`, `inf`, `-inf`) anywhere in
/// `table`, naming it by the path serde_path_to_error prints for every
/// other error (`scopes.p.limits[0].amount`) and by the value as written;
/// `path` is where `table` sits. No field takes one: every float is a
/// fraction, a price or a budget.
fn refuse_non_finite(path: &mut String, table: &toml::de::DeTable<'_>) -> Result<()> {
    for (key, value) in table {
        let len = path.len();
        if len > 0 {
            path.push('.');
        }
        path.push_str(key.get_ref());
        refuse_non_finite_value(path, value.get_ref())?;
        path.truncate(len);
    }
    Ok(())
}

/// [`refuse_non_finite`] for one value at `path`.
fn refuse_non_finite_value(path: &mut String, value: &toml::de::DeValue<'_>) -> Result<()> {
    match value {
        // Only those spelt `nan` or `inf`: toml refuses an overflow (`1e400`)
        // itself, naming it.
        toml::de::DeValue::Float(float) if ["nan", "inf"].iter().any(|word| float.as_str().contains(word)) => {
            Err(Error::config(path.clone(), float.as_str(), "must be a finite number"))
        }
        toml::de::DeValue::Table(table) => refuse_non_finite(path, table),
        toml::de::DeValue::Array(items) => items.iter().enumerate().try_for_each(|(index, item)| {
            let len = path.len();
            path.push_str(&format!("[{index}]"));
            refuse_non_finite_value(path, item.get_ref())?;
            path.truncate(len);
            Ok(())
        }),
        _ => Ok(()),
    }
}
