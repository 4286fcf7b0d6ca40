//! The `nop` binary: parses the command line and hands it to the library.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
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
    quiet_on_closed_pipe();
    // Built once (it is most of what parsing costs): for the short forms, then for parsing.
    let command = Cli::command();
    let args = cli::implicit_run(&command, args);
    let cli = Cli::from_arg_matches(&command.get_matches_from(args))
        .unwrap_or_else(|e| e.format(&mut Cli::command()).exit());
    let outside = Outside {
        cwd: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        // Configuration reads NOP_* variables; the provider reads its key variable. Variables
        // that are not UTF-8 are nobody's business here (and `vars()` would panic on them).
        env: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    };
    let json_result = cli.json_result();
    match cli::run(cli, outside) {
        Ok(code) => code,
        // `nop sessions list | head`: the reader is gone, as with `git log | head`.
        Err(e) if closed_pipe(&e) => ExitCode::from(exit::CLOSED_PIPE),
        Err(e) => {
            let message = said_once(&e);
            tracing::error!(result = "error", "{message}");
            // On a terminal, broken between words at its width (`say` prints it whole
            // elsewhere).
            cli::say(&format!("error: {message}"));
            if let Some(format) = json_result {
                // A script reading the result still gets one: never a silent failure.
                cli::failed_result(format, &message);
            }
            ExitCode::from(exit::ERROR)
        }
    }
}

/// Whether `e` is a write to a pipe whose reader has gone.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `println!` panics when stdout's reader has gone (`nop -p … | head -1`): that ends nop
/// quietly, with the status a process killed by SIGPIPE has, as `git log | head` does. nop
/// keeps ignoring SIGPIPE itself: a hook or server that exits without reading its input must
/// not kill it.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(i32::from(exit::CLOSED_PIPE));
        }
        default(info);
    }));
}

/// The error and its causes, each said once: many library errors already show their cause in
/// their own text (`path: cause`), so a cause whose text ends the message so far is not added
/// again.
fn said_once(e: &anyhow::Error) -> String {
    let mut message = String::new();
    for part in e.chain().map(|c| c.to_string()) {
        if message.is_empty() {
            message = part;
        } else if !message.ends_with(&part) {
            message.push_str(": ");
            message.push_str(&part);
        }
    }
    message
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Io {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_said_again() {
        let e: anyhow::Error = Io {
            path: "/r/session.json".into(),
            source: std::io::Error::other("disk full"),
        }
        .into();
        assert_eq!(super::said_once(&e), "/r/session.json: disk full");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::said_once(&e), "outer: inner");
    }
}
