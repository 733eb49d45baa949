//! C types shared by several parts of the API, and the table macro that gives each C enum one source.

use kreplay_core::PointerType;

use crate::ops::{RawPointerType, kreplay_pointer_type_t};

/// A GPU as the host names it; the layout of `hsa_agent_t`, so a host can pass one for the other.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct kreplay_agent_t {
    /// The runtime's opaque handle.
    pub handle: u64,
}

impl From<kreplay_agent_t> for kreplay_core::Agent {
    fn from(agent: kreplay_agent_t) -> Self {
        kreplay_core::Agent(agent.handle)
    }
}

impl From<kreplay_core::Agent> for kreplay_agent_t {
    fn from(agent: kreplay_core::Agent) -> Self {
        kreplay_agent_t { handle: agent.0 }
    }
}

enum_table! {
    kreplay_pointer_type_t from RawPointerType, engine PointerType, unknown c"unknown pointer type";
    KREPLAY_POINTER_UNKNOWN = PointerType::Unknown => c"not memory the runtime knows",
    KREPLAY_POINTER_DEVICE = PointerType::Device => c"device memory",
    KREPLAY_POINTER_LOCKED = PointerType::Locked => c"page-locked host memory",
    KREPLAY_POINTER_GRAPHICS = PointerType::Graphics => c"memory shared with a graphics API",
    KREPLAY_POINTER_IPC = PointerType::Ipc => c"memory imported from another process",
    KREPLAY_POINTER_MANAGED = PointerType::Managed => c"unified (managed) memory",
}

impl RawPointerType {
    /// The engine's kind of memory; values this library does not know are `PointerType::Unknown`.
    pub(crate) fn kind(self) -> PointerType {
        kreplay_pointer_type_t::from_raw(self.0)
            .and_then(kreplay_pointer_type_t::engine)
            .unwrap_or(PointerType::Unknown)
    }
}

/// Writes `value` through `out` when `out` is not NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for writes by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// One table per C enum: each row names a variant of the C enum (declared next to it as a plain `#[repr(C)]`
/// enum, which is what cbindgen reads), the engine value it stands for (when it has one) and its static
/// description. From the rows come the conversions both ways, the check of raw values arriving from C and the
/// strings. A variant without a row, or an engine value without one, does not compile (the matches are
/// exhaustive).
///
/// ```ignore
/// enum_table! {
///     kreplay_status_t from RawStatus, engine Error, unknown c"unknown status";
///     KREPLAY_STATUS_SUCCESS => c"success",
///     KREPLAY_STATUS_INVALID_ARGUMENT = Error::InvalidArgument => c"invalid argument",
/// }
/// ```
macro_rules! enum_table {
    (
        $c:ident from $raw:ident, engine $engine:ty, unknown $unknown:expr;
        $( $variant:ident $(= $value:path)? => $text:expr ),+ $(,)?
    ) => {
        #[allow(dead_code)]
        impl $c {
            /// Every variant, in table order.
            pub(crate) const ALL: &'static [$c] = &[$($c::$variant),+];

            /// The static description of this value.
            pub(crate) const fn text(self) -> &'static ::std::ffi::CStr {
                match self {
                    $($c::$variant => $text),+
                }
            }

            /// The variant with this raw value, if there is one.
            pub(crate) const fn from_raw(raw: u32) -> Option<Self> {
                $(if raw == $c::$variant as u32 {
                    return Some($c::$variant);
                })+
                None
            }

            /// The description of a raw value, which may be one this library does not know.
            pub(crate) const fn raw_text(raw: $raw) -> &'static ::std::ffi::CStr {
                match Self::from_raw(raw.0) {
                    Some(value) => value.text(),
                    None => $unknown,
                }
            }

            /// The engine's value, for the variants that have one.
            pub(crate) fn engine(self) -> Option<$engine> {
                match self {
                    $($c::$variant => enum_table!(@engine $($value)?)),+
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
