//! What two endpoints exchange out of band before talking
//! (docs/spec/wire.md#endpoint-info): nothing else is needed, no handshake message follows.

/// One endpoint's connection information; the peer passes it to
/// [`Context::connect`](super::Context::connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointInfo {
    /// The RC QP's number.
    pub qpn: u32,
    /// WQE address of the recv ring.
    pub recv_ring_addr: u64,
    /// Remote key of the recv ring.
    pub recv_ring_rkey: u32,
    /// Recv ring size in bytes (a power of two).
    pub recv_ring_size: u64,
    /// WQE address of the exported consumer position (8 bytes, little-endian).
    pub consumer_addr: u64,
    /// Remote key of the consumer position.
    pub consumer_rkey: u32,
    /// Credit offered for the peer's requests: our reservation cap.
    pub initial_credit: u64,
}

impl EndpointInfo {
    /// Bytes of [`to_bytes`](Self::to_bytes).
    pub const BYTES: usize = 48;

    /// A fixed little-endian encoding, for exchanges over MPI, sockets or shared memory.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..8].copy_from_slice(&self.recv_ring_rkey.to_le_bytes());
        b[8..16].copy_from_slice(&self.recv_ring_addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.recv_ring_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.consumer_addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.consumer_rkey.to_le_bytes());
        b[40..48].copy_from_slice(&self.initial_credit.to_le_bytes());
        b
    }

    /// Decodes [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Self {
            qpn: u32_at(0),
            recv_ring_rkey: u32_at(4),
            recv_ring_addr: u64_at(8),
            recv_ring_size: u64_at(16),
            consumer_addr: u64_at(24),
            consumer_rkey: u32_at(32),
            initial_credit: u64_at(40),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        let i = EndpointInfo {
            qpn: 0x12_3456,
            recv_ring_addr: 0x7f00_dead_beef,
            recv_ring_rkey: 0xabcd,
            recv_ring_size: 1 << 20,
            consumer_addr: 0x7f00_0000_1000,
            consumer_rkey: 0x99,
            initial_credit: 4096,
        };
        assert_eq!(EndpointInfo::from_bytes(&i.to_bytes()), i);
        assert_eq!(i.to_bytes()[0..4], [0x56, 0x34, 0x12, 0]);
    }
}
