//! One integration-test binary: every file under suite/ is a module of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
mod support;
