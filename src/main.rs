//! The `nop` binary: parses the command line and hands it to the library.

use std::process::ExitCode;

use clap::Parser;
use nop::cli::{Cli, Outside, exit};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outside = Outside {
        cwd: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        env: std::env::vars()
            .filter(|(k, _)| k.starts_with("NOP_"))
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
