//! The builder-style setters of the plain data types ([`Capabilities`],
//! [`HolderInfo`], [`RunRecord`], [`StoreEpoch`]), written once.
//!
//! [`Capabilities`]: crate::backend::Capabilities
//! [`HolderInfo`]: crate::backend::HolderInfo
//! [`RunRecord`]: crate::RunRecord
//! [`StoreEpoch`]: crate::backend::StoreEpoch

/// Expands, inside `impl`, each `fn NAME(FIELD: TYPE);` (with its docs) to
/// `pub fn NAME(mut self, FIELD: TYPE) -> Self`, which sets `self.FIELD`.
macro_rules! setters {
    ($($(#[$attr:meta])* fn $name:ident($field:ident: $ty:ty);)+) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )+
    };
}

pub(crate) use setters;
