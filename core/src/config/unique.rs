//! Maps whose keys must be unique: TOML refuses a key given twice, but
//! JSON parsers keep the last one silently, so a JSON config naming a scope
//! twice lost the first one's limits without a word.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, Error, MapAccess, Visitor};
use serde::Deserialize;

/// Deserializes a map of names, refusing a name given more than once. The
/// error quotes the name in backticks, which the config's error reads as
/// the value at fault.
pub(crate) fn unique_keys<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    deserializer.deserialize_map(UniqueKeys(PhantomData))
}

struct UniqueKeys<V>(PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueKeys<V> {
    type Value = BTreeMap<String, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of names")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut map = BTreeMap::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                return Err(A::Error::custom(format!("`{key}` is given more than once")));
            }
            let value = access.next_value()?;
            map.insert(key, value);
        }
        Ok(map)
    }
}
