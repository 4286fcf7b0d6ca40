//! The `nop` binary: parses the command line and hands it to the library.

use std::process::ExitCode;

use clap::Parser;
use nop::cli::{Cli, Outside, exit};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outside = Outside {
        cwd: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        // Configuration reads NOP_* variables; the provider reads its key variable. Variables
        // that are not UTF-8 are nobody's business here (and `vars()` would panic on them).
        env: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    };
    match nop::cli::run(cli, outside) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(result = "error", "{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    }
}
