//! The ABI version: what the header says, what the library says, and the check between
//! them a program makes first (`copyrpc_init`).
//!
//! While the major version is 0, every minor version is its own ABI (semver's rule for
//! 0.x): a program runs only with the minor it was built for. From 1.0 a library runs
//! programs built for its major and any minor up to its own. The shared library's
//! symbol version (`COPYRPC_<major>.<minor>` while 0.x, `COPYRPC_<major>` after) makes
//! the dynamic loader refuse a mismatch before `copyrpc_init` runs; the check catches a
//! static link or a hand-copied header.

use crate::status::{COPYRPC_E_VERSION, COPYRPC_OK};

/// Major version of this header (the `N` of the shared library's `libcopyrpc.so.N`).
pub const COPYRPC_VERSION_MAJOR: u32 = 0;
/// Minor version of this header.
pub const COPYRPC_VERSION_MINOR: u32 = 1;
/// Patch version of this header.
pub const COPYRPC_VERSION_PATCH: u32 = 0;
/// This header's version as one number, `major << 16 | minor << 8 | patch`: pass it to
/// `copyrpc_init`.
pub const COPYRPC_VERSION: u32 =
    COPYRPC_VERSION_MAJOR << 16 | COPYRPC_VERSION_MINOR << 8 | COPYRPC_VERSION_PATCH;

/// The library's version, encoded as `COPYRPC_VERSION` (which is the header's).
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_version() -> u32 {
    COPYRPC_VERSION
}

/// Whether a program built with header `built` runs with this library.
const fn compatible(built: u32) -> bool {
    let (major, minor) = (built >> 16, (built >> 8) & 0xff);
    major == COPYRPC_VERSION_MAJOR
        && if major == 0 {
            minor == COPYRPC_VERSION_MINOR
        } else {
            minor <= COPYRPC_VERSION_MINOR
        }
}

/// The first call of a program: `copyrpc_init(COPYRPC_VERSION)`. Returns `COPYRPC_OK`
/// when the library runs programs built with that header, else `COPYRPC_E_VERSION`
/// (nothing else of the library should be called then: struct sizes and codes may
/// differ). It keeps no state; calling it again, or not at all, changes nothing else.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_init(header_version: u32) -> i32 {
    if compatible(header_version) {
        COPYRPC_OK
    } else {
        COPYRPC_E_VERSION
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_version_is_the_crate_version() {
        let v = |s: &str| s.parse::<u32>().unwrap();
        assert_eq!(COPYRPC_VERSION_MAJOR, v(env!("CARGO_PKG_VERSION_MAJOR")));
        assert_eq!(COPYRPC_VERSION_MINOR, v(env!("CARGO_PKG_VERSION_MINOR")));
        assert_eq!(COPYRPC_VERSION_PATCH, v(env!("CARGO_PKG_VERSION_PATCH")));
    }

    #[test]
    fn init_takes_this_minor_only_while_major_is_0() {
        assert_eq!(copyrpc_init(COPYRPC_VERSION), COPYRPC_OK);
        assert_eq!(copyrpc_version(), COPYRPC_VERSION);
        // Another patch: the same ABI.
        assert_eq!(copyrpc_init(COPYRPC_VERSION ^ 1), COPYRPC_OK);
        assert_eq!(copyrpc_init(COPYRPC_VERSION + (1 << 8)), COPYRPC_E_VERSION);
        assert_eq!(copyrpc_init(COPYRPC_VERSION + (1 << 16)), COPYRPC_E_VERSION);
        if COPYRPC_VERSION_MINOR > 0 {
            assert_eq!(copyrpc_init(COPYRPC_VERSION - (1 << 8)), COPYRPC_E_VERSION);
        }
        assert_eq!(copyrpc_init(0xffff_ffff), COPYRPC_E_VERSION);
    }
}
