//! A check the error enums' unit tests share. The host and the C ABI quote an error's
//! `Display` text on its own, so each must say something, and something no other value
//! of its type says.

use core::fmt::{Debug, Display};
use std::string::{String, ToString};
use std::vec::Vec;

/// The texts of `all`, after checking that each is non-empty and that no two are equal.
pub(crate) fn distinct_texts<T: Display + Debug>(all: &[T]) -> Vec<String> {
    let texts: Vec<String> = all.iter().map(ToString::to_string).collect();
    for (i, t) in texts.iter().enumerate() {
        assert!(!t.is_empty(), "{:?} has no text", all[i]);
        if let Some(j) = texts[..i].iter().position(|u| u == t) {
            panic!("{:?} and {:?} both read {t:?}", all[j], all[i]);
        }
    }
    texts
}
