//! Unit tests of the device model.
