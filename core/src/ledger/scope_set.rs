//! The scopes a route charges, as a route and each of its permits hold them.

use std::sync::Arc;

use super::registry::ScopeId;

const INLINE: usize = 8;

/// Up to eight scope ids inline, more behind a shared pointer.
///
/// Every permit copies its route's set. A fixed array copies as two vector
/// moves; a `SmallVec` copy went through `memmove`, whose byte-wise stores
/// the next read could not forward, and cost a third of an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeSet {
    Inline { len: u8, ids: [ScopeId; INLINE] },
    Shared(Arc<[ScopeId]>),
}

impl ScopeSet {
    pub fn new(ids: &[ScopeId]) -> Self {
        if ids.len() <= INLINE {
            let mut inline = [ScopeId(0); INLINE];
            inline[..ids.len()].copy_from_slice(ids);
            ScopeSet::Inline { len: ids.len() as u8, ids: inline }
        } else {
            ScopeSet::Shared(ids.into())
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[ScopeId] {
        match self {
            ScopeSet::Inline { len, ids } => &ids[..*len as usize],
            ScopeSet::Shared(ids) => ids,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_short_and_long_sets() {
        let short: Vec<ScopeId> = (0..3).map(ScopeId).collect();
        let long: Vec<ScopeId> = (0..12).map(ScopeId).collect();
        assert_eq!(ScopeSet::new(&short).as_slice(), &short[..]);
        assert_eq!(ScopeSet::new(&long).clone().as_slice(), &long[..]);
    }
}
