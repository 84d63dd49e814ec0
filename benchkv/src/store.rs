//! One shard's key-value table: fixed capacity, open addressing, preloaded before the run.
//!
//! Values carry their key: `value = tag(key) << 32 | version`. A GET can then be checked
//! (`--verify`) without knowing which PUTs raced it: whatever version it reads, the upper
//! half must be the tag of the key it asked for. A request routed to the wrong shard or
//! rank, a response delivered to the wrong call, or a torn slot shows up as a mismatch.

use crate::msg::{Request, Response, Status, OP_GET, OP_PUT};

/// The 32-bit tag of `key` stored in the upper half of its values.
pub fn tag(key: u64) -> u32 {
    // splitmix64's finaliser: neighbouring keys get unrelated tags, so a key off by one
    // does not pass for its neighbour.
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// The value version `version` of `key` has.
pub fn value_for(key: u64, version: u32) -> u64 {
    (u64::from(tag(key)) << 32) | u64::from(version)
}

/// True if `value` is some version of `key`'s value.
pub fn value_matches(key: u64, value: u64) -> bool {
    (value >> 32) as u32 == tag(key)
}

const EMPTY: u64 = u64::MAX;

/// A fixed-capacity `u64 -> u64` table (linear probing, never resized, no deletes).
/// `u64::MAX` is reserved as the empty marker and cannot be a key.
#[derive(Debug)]
pub struct Store {
    keys: Box<[u64]>,
    values: Box<[u64]>,
    mask: usize,
    len: usize,
}

impl Store {
    /// A table for at least `n` keys, at most half full so probes stay short.
    pub fn with_capacity(n: usize) -> Self {
        let cap = (n.max(1) * 2).next_power_of_two();
        Self {
            keys: vec![EMPTY; cap].into_boxed_slice(),
            values: vec![0; cap].into_boxed_slice(),
            mask: cap - 1,
            len: 0,
        }
    }

    /// The shard `shard` of `shards` for keys `0..keys`: every key with
    /// `key % shards == shard`, at version 0.
    pub fn preloaded(keys: u64, shards: usize, shard: usize) -> Self {
        let mine = (shard as u64..keys).step_by(shards);
        let mut s = Self::with_capacity(mine.clone().count());
        for k in mine {
            let ok = s.put(k, value_for(k, 0));
            debug_assert!(ok, "sized for every key");
        }
        s
    }

    /// Keys stored.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    fn slot_of(&self, key: u64) -> Option<usize> {
        // Keys are dense small integers: hash them so runs of keys do not form one long
        // probe chain.
        let mut i = (u64::from(tag(key)) as usize ^ key as usize) & self.mask;
        for _ in 0..=self.mask {
            if self.keys[i] == key || self.keys[i] == EMPTY {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        let i = self.slot_of(key)?;
        (self.keys[i] == key).then(|| self.values[i])
    }

    /// Stores `value` under `key`; false if the key is new and the table is full (or the
    /// key is the reserved empty marker).
    pub fn put(&mut self, key: u64, value: u64) -> bool {
        if key == EMPTY {
            return false;
        }
        let Some(i) = self.slot_of(key) else {
            return false;
        };
        if self.keys[i] == EMPTY {
            // Keep one slot empty so probes of absent keys terminate.
            if self.len + 1 > self.mask {
                return false;
            }
            self.keys[i] = key;
            self.len += 1;
        }
        self.values[i] = value;
        true
    }

    /// Serves one request (seed `handle_local`).
    pub fn handle(&mut self, req: &Request) -> Response {
        match req.op {
            OP_GET => match self.get(req.key) {
                Some(v) => Response::new(Status::GetOk, v),
                None => Response::new(Status::NotFound, 0),
            },
            OP_PUT => {
                if self.put(req.key, req.value) {
                    Response::new(Status::PutOk, 0)
                } else {
                    Response::new(Status::StoreFull, 0)
                }
            }
            _ => Response::new(Status::BadOp, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_holds_exactly_the_shard_keys() {
        let s = Store::preloaded(100, 3, 1);
        assert_eq!(s.len(), 33);
        for k in 0..100 {
            let want = (k % 3 == 1).then(|| value_for(k, 0));
            assert_eq!(s.get(k), want, "key {k}");
        }
        assert_eq!(s.get(1000), None);
    }

    #[test]
    fn put_then_get_and_full_table_refuses_new_keys() {
        let mut s = Store::with_capacity(2);
        let cap = s.mask + 1;
        for k in 0..(cap as u64 - 1) {
            assert!(s.put(k, k * 10));
        }
        assert!(!s.put(999, 1), "one slot stays empty");
        assert!(s.put(0, 5), "existing keys can still be written");
        assert_eq!(s.get(0), Some(5));
        assert_eq!(s.get(999), None);
        assert!(!s.put(u64::MAX, 1));
    }

    #[test]
    fn handle_serves_get_put_and_refuses_bad_ops() {
        let mut s = Store::preloaded(10, 1, 0);
        let r = s.handle(&Request::get(0, 3));
        assert_eq!(r.status(), Some(Status::GetOk));
        assert!(value_matches(3, r.value));
        assert_eq!(
            s.handle(&Request::put(0, 3, value_for(3, 7))).status(),
            Some(Status::PutOk)
        );
        assert_eq!(s.handle(&Request::get(0, 3)).value, value_for(3, 7));
        assert_eq!(
            s.handle(&Request::get(0, 11)).status(),
            Some(Status::NotFound)
        );
        let bad = Request {
            op: 9,
            ..Request::get(0, 1)
        };
        assert_eq!(s.handle(&bad).status(), Some(Status::BadOp));
    }

    #[test]
    fn values_of_other_keys_do_not_match() {
        assert!(value_matches(5, value_for(5, 123)));
        assert!(!value_matches(5, value_for(6, 123)));
        assert!(!value_matches(6, value_for(5, 0)));
    }
}
