//! QPN → endpoint index, fixed capacity, no hashing (seed 002 "FastMap").
//!
//! Slot `qpn % N`, then linear probing. A NIC hands out QPNs of one process
//! sequentially, so with `N` at least the endpoint count every lookup hits on the first
//! probe; the probe length is bounded by the longest one any insert needed, which is
//! kept, so a miss costs no more than that either.

#[derive(Debug)]
pub(crate) struct QpnMap<const N: usize> {
    slots: [Option<(u32, u16)>; N],
    /// Longest probe sequence any insert used (1 = direct hit).
    max_probe: usize,
}

impl<const N: usize> QpnMap<N> {
    pub(crate) const fn new() -> Self {
        Self {
            slots: [None; N],
            max_probe: 0,
        }
    }

    /// Maps `qpn` to `ep`; fails if full or already mapped.
    pub(crate) fn insert(&mut self, qpn: u32, ep: u16) -> Result<(), ()> {
        if self.get(qpn).is_some() || N == 0 {
            return Err(());
        }
        let start = qpn as usize % N;
        for probe in 0..N {
            let slot = &mut self.slots[(start + probe) % N];
            if slot.is_none() {
                *slot = Some((qpn, ep));
                self.max_probe = self.max_probe.max(probe + 1);
                return Ok(());
            }
        }
        Err(())
    }

    #[inline]
    pub(crate) fn get(&self, qpn: u32) -> Option<u16> {
        if N == 0 {
            return None;
        }
        let start = qpn as usize % N;
        for probe in 0..self.max_probe {
            match self.slots[(start + probe) % N] {
                Some((q, ep)) if q == qpn => return Some(ep),
                _ => {}
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
}
