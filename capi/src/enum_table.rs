//! The mapping from each C enum onto the engine's enum it stands for.
//!
//! The engine owns every value and its text (`kreplay_core::error::c_enum!`). A C enum is declared again next
//! to its export, as the plain `#[repr(C)]` enum cbindgen reads (it cannot expand macros), with the same
//! numbers; [`enum_table!`] then maps it, one row per variant, and checks at compile time that both sides of
//! each row carry the same number.

/// One row per variant of a C enum: the engine's value it stands for, when it has one. From the rows come the
/// conversions both ways and a compile-time check that the numbers agree. A C variant without a row, or an
/// engine value without one, does not compile (the matches are exhaustive). Appending a value is one row.
///
/// ```ignore
/// enum_table! {
///     kreplay_status_t <=> Error;
///     KREPLAY_STATUS_SUCCESS,
///     KREPLAY_STATUS_INVALID_ARGUMENT = Error::InvalidArgument,
/// }
/// ```
macro_rules! enum_table {
    (
        $c:ident <=> $engine:ty;
        $( $variant:ident $(= $value:path)? ),+ $(,)?
    ) => {
        const _: () = {
            $($(assert!(
                $c::$variant as u32 == $value as u32,
                concat!(stringify!($variant), " and ", stringify!($value), " carry different numbers")
            );)?)+
        };

        #[allow(dead_code, reason = "each table is used in one direction or the other, ALL only by tests")]
        impl $c {
            /// Every variant, in table order.
            pub(crate) const ALL: &'static [$c] = &[$($c::$variant),+];

            /// The engine's value, for the variants that have one.
            pub(crate) const fn engine(self) -> Option<$engine> {
                match self {
                    $($c::$variant => $crate::enum_table::enum_table!(@engine $($value)?)),+
                }
            }
        }

        impl From<$engine> for $c {
            fn from(value: $engine) -> Self {
                match value {
                    $($($value => $c::$variant,)?)+
                }
            }
        }
    };
    (@engine $value:path) => { Some($value) };
    (@engine) => { None };
}
pub(crate) use enum_table;
