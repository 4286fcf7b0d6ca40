//! nop: a terminal coding agent whose sessions are plain files.
//!
//! The engine lives here; `main.rs` is a thin front end. Arrows point inward: `cli` renders and
//! calls the engine, the engine never prints.

pub mod advisors;
pub mod agent;
pub mod chat;
pub mod cli;
pub mod config;
pub mod hooks;
pub mod logging;
pub mod memory;
pub mod permissions;
pub mod plugins;
pub mod protocol;
pub mod providers;
pub mod queue;
pub mod sandbox;
pub mod session;
pub mod tools;
pub mod workspace;
