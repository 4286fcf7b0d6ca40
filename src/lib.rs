//! nop: a terminal coding agent whose sessions are plain files.
//!
//! The engine lives here. The front end (`src/cli/`, the binary's own module) renders and calls
//! the engine; the engine never prints and cannot see the front end.

// stdout belongs to `--output-format` and the front end; the engine reports through events,
// errors and tracing. The one exception is the sandbox helper (`src/sandbox/`), a process of its
// own that says why it could not run a command (stderr) and answers `--probe` (stdout).
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod advisors;
pub mod agent;
pub mod capped_file;
pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod front_matter;
pub mod gitdir;
pub mod head_tail;
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
pub mod skills;
pub mod slash_commands;
pub mod templates;
pub mod tools;
pub mod trust;
pub mod workspace;
