//! The `nop` binary: parses the command line and hands it to the library.

use std::process::ExitCode;

use clap::Parser;
mod cli;

use cli::{Cli, Outside, exit};

fn main() -> ExitCode {
    // The shell tool's sandbox re-executes nop to confine one command; it must not touch clap,
    // logging or anything else before it becomes that command.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "__sandbox") {
        std::process::exit(nop::sandbox::sandbox_main(&args[2..]));
    }
    nop::sandbox::protect_this_process();
    let cli = Cli::parse_from(cli::implicit_run(args));
    let outside = Outside {
        cwd: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        // Configuration reads NOP_* variables; the provider reads its key variable. Variables
        // that are not UTF-8 are nobody's business here (and `vars()` would panic on them).
        env: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    };
    match cli::run(cli, outside) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(result = "error", "{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    }
}
