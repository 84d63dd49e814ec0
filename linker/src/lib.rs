//! C-ABI surface of the no_std core (grows with the core).
#![cfg_attr(not(test), no_std)]
