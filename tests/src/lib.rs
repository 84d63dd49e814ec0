//! Cross-crate and multi-process integration tests live under `tests/tests/`.
