//! QPN → endpoint index, fixed capacity, no hashing (docs/spec/copyrpc.md#context).
//!
//! Slot `qpn % N`, then linear probing. A NIC hands out QPNs of one process
//! sequentially, so with `N` at least the endpoint count every lookup hits on the first
//! probe; the probe length is bounded by the longest one any insert needed, which is
//! kept, so a miss costs no more than that either.

use mlx5_raw::layout::QPN_MASK;

/// An empty slot's QPN. A QPN is 24 bits (`sop_drop_qpn[23:0]`; `insert` refuses a
/// wider one), so no QPN a completion names equals it: the home slot's test is one
/// compare, with no separate test for an empty slot.
const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Slot {
    qpn: u32,
    ep: u16,
}

/// `repr(C)`, the slots first: a first-probe hit reads only its home slot, never the
/// probe bound. (With one endpoint the map starts the context's line that holds the
/// receive queue's ends and the batch counters; see `Context`.)
#[derive(Debug)]
#[repr(C)]
pub(crate) struct QpnMap<const N: usize> {
    slots: [Slot; N],
    /// Longest probe sequence any insert used (1 = direct hit); at most `N` ≤ 2^16.
    max_probe: u32,
}

impl<const N: usize> QpnMap<N> {
    pub(crate) const fn new() -> Self {
        Self {
            slots: [Slot { qpn: EMPTY, ep: 0 }; N],
            max_probe: 0,
        }
    }

    /// Maps `qpn` to `ep`; fails if full, already mapped, or `qpn` is wider than 24 bits.
    pub(crate) fn insert(&mut self, qpn: u32, ep: u16) -> Result<(), ()> {
        if qpn & !QPN_MASK != 0 || self.get(qpn).is_some() || N == 0 {
            return Err(());
        }
        let start = qpn as usize % N;
        for probe in 0..N {
            let slot = &mut self.slots[(start + probe) % N];
            if slot.qpn == EMPTY {
                *slot = Slot { qpn, ep };
                // `probe < N` ≤ 2^16.
                self.max_probe = self.max_probe.max(probe as u32 + 1);
                return Ok(());
            }
        }
        Err(())
    }

    /// The endpoint `qpn` (24 bits, as a completion names it) is mapped to.
    #[inline]
    pub(crate) fn get(&self, qpn: u32) -> Option<u16> {
        debug_assert_eq!(qpn & !QPN_MASK, 0, "QPNs are 24 bits");
        if N == 0 {
            return None;
        }
        let start = qpn as usize % N;
        // The usual case (sequential QPNs): the home slot, one compare. An empty one
        // holds `EMPTY`, which no 24-bit QPN equals.
        let home = self.slots[start];
        if home.qpn == qpn {
            return Some(home.ep);
        }
        for probe in 1..self.max_probe as usize {
            let slot = self.slots[(start + probe) % N];
            if slot.qpn == qpn {
                return Some(slot.ep);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_qpns_hit_directly_and_collisions_probe() {
        let mut m: QpnMap<4> = QpnMap::new();
        for (i, q) in (0x100..0x104).enumerate() {
            m.insert(q, i as u16).unwrap();
        }
        assert_eq!(m.max_probe, 1);
        assert_eq!(m.get(0x102), Some(2));
        assert_eq!(m.get(0x104), None);
        let mut m: QpnMap<4> = QpnMap::new();
        m.insert(8, 0).unwrap();
        m.insert(12, 1).unwrap(); // same home slot
        assert_eq!((m.get(8), m.get(12), m.get(16)), (Some(0), Some(1), None));
        assert!(m.insert(12, 3).is_err());
    }

    #[test]
    fn an_empty_map_and_empty_slots_match_no_qpn() {
        let m: QpnMap<4> = QpnMap::new();
        for q in [0, 1, 3, 4, QPN_MASK] {
            assert_eq!(m.get(q), None, "qpn {q:#x}");
        }
        let mut m: QpnMap<4> = QpnMap::new();
        m.insert(0, 7).unwrap();
        assert_eq!((m.get(0), m.get(4), m.get(1)), (Some(7), None, None));
        assert!(m.insert(QPN_MASK + 1, 1).is_err(), "wider than 24 bits");
        assert!(m.insert(u32::MAX, 1).is_err(), "the empty marker");
        assert_eq!(m.get(QPN_MASK), None);
    }

    #[test]
    fn a_full_map_refuses_and_finds_every_entry_behind_collisions() {
        let mut m: QpnMap<3> = QpnMap::new();
        // All three share home slot 0 (qpn % 3 == 0): probes 1, 2 and 3.
        for (i, q) in [3, 6, 9].into_iter().enumerate() {
            m.insert(q, i as u16).unwrap();
        }
        assert_eq!(m.max_probe, 3);
        assert_eq!((m.get(3), m.get(6), m.get(9)), (Some(0), Some(1), Some(2)));
        assert_eq!(m.get(12), None, "a miss walks max_probe slots and stops");
        assert!(m.insert(12, 3).is_err(), "full");
    }
}
