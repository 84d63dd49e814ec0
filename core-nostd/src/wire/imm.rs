//! The 32-bit immediate of a WRITE-with-immediate: the batch length in 32 B units.

use super::{WireError, ALIGNMENT};

/// The four immediate bytes exactly as they sit in the mlx5 ctrl segment's `imm` field
/// and come back in the CQE's `imm_inval_pkey` field.
///
/// Both fields are `__be32` in `mlx5dv.h` and verbs treats `imm_data` as `__be32`, so
/// the value is stored big-endian (network order). Keeping the raw bytes in a newtype
/// means a forgotten byte swap does not type-check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Imm([u8; 4]);

impl Imm {
    /// Wraps four bytes read from a WQE or CQE.
    #[inline]
    pub const fn from_bytes(bytes: [u8; 4]) -> Self {
        Self(bytes)
    }

    /// Wraps a host-order value.
    #[inline]
    pub const fn from_value(value: u32) -> Self {
        Self(value.to_be_bytes())
    }

    /// The bytes to store into a WQE.
    #[inline]
    pub const fn to_bytes(self) -> [u8; 4] {
        self.0
    }

    /// The host-order value.
    #[inline]
    pub const fn value(self) -> u32 {
        u32::from_be_bytes(self.0)
    }
}

/// Encodes a batch length. Fails rather than truncate: a truncated delta would put the
/// receiver's producer out of step for good.
#[inline]
pub const fn encode_imm(delta: u64) -> Result<Imm, WireError> {
    if !delta.is_multiple_of(ALIGNMENT) {
        return Err(WireError::Misaligned);
    }
    let units = delta / ALIGNMENT;
    if units > u32::MAX as u64 {
        return Err(WireError::ImmOverflow);
    }
    Ok(Imm::from_value(units as u32))
}

/// The batch length an immediate carries.
#[inline]
pub const fn decode_imm(imm: Imm) -> u64 {
    imm.value() as u64 * ALIGNMENT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes() {
        assert_eq!(encode_imm(64).unwrap().to_bytes(), [0x00, 0x00, 0x00, 0x02]);
        assert_eq!(
            encode_imm(0x1234_5678 * 32).unwrap().to_bytes(),
            [0x12, 0x34, 0x56, 0x78]
        );
        assert_eq!(decode_imm(Imm::from_bytes([0, 0, 1, 0])), 256 * 32);
    }

    #[test]
    fn rejects_instead_of_truncating() {
        assert_eq!(encode_imm(33), Err(WireError::Misaligned));
        assert_eq!(encode_imm(32 << 32), Err(WireError::ImmOverflow));
        let max = encode_imm(u32::MAX as u64 * 32).unwrap();
        assert_eq!(max.to_bytes(), [0xff; 4]);
        assert_eq!(decode_imm(max), u32::MAX as u64 * 32);
    }
}
