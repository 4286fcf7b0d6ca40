//! `nop chat` and `nop run --message …`: renderers of a chat handle's events.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use super::OutputFormat;
use super::run::tokio_runtime;
use super::term::style::visible;
use nop::agent::{ChatHandle, Op, Quiet, Runtime};
use nop::protocol::events::Event;

/// `nop run --message a --message b`: one batch answered at once (seed 001 §3.2 "方案A").
pub fn batch(
    runtime: Runtime,
    session: Option<String>,
    agent: &str,
    messages: Vec<String>,
    format: OutputFormat,
) -> Result<ExitCode> {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        // Admitted like a run (seed 000): refused the same way, exit code 4.
        let mut chat = match ChatHandle::batch(&runtime, session, agent, messages).await {
            Err(nop::agent::RunError::Refused(reason)) => {
                super::output::refused(format, &reason);
                return Ok(ExitCode::from(super::exit::REFUSED));
            }
            opened => opened?,
        };
        while let Some(event) = chat.next_event().await {
            if matches!(event, Event::BatchAnswered { .. }) {
                super::output::batch_answered(format, &event);
            }
        }
        chat.finish().await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `nop chat`: what is typed is answered in batches after a quiet period, and each reply is
/// shown when it is due. Lines typed while replies are still coming start the next batch.
pub fn chat(runtime: Runtime, session: Option<String>, agent: &str) -> Result<ExitCode> {
    let rt = tokio_runtime()?;
    let quiet = Quiet::of(runtime.config());
    let (session, mut chat) = match rt.block_on(ChatHandle::chat(&runtime, session, agent, quiet)) {
        Err(nop::agent::RunError::Refused(reason)) => {
            super::output::refused(OutputFormat::Text, &reason);
            return Ok(ExitCode::from(super::exit::REFUSED));
        }
        opened => opened?,
    };
    eprintln!("chatting with {agent} (session {session}); /exit to leave");
    let typed = chat.submitter();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            let op = match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => Op::Shutdown,
                Ok(_) if line.trim() == "/exit" => Op::Shutdown,
                Ok(_) => Op::UserInput {
                    text: line.trim_end().to_string(),
                },
            };
            let leaving = op == Op::Shutdown;
            if !typed.submit(op) || leaving {
                return;
            }
        }
    });
    rt.block_on(async {
        // The countdown of the batch waiting for its quiet period to end.
        let mut countdown: Option<tokio::time::Instant> = None;
        let mut shown = false;
        let clear = |shown: &mut bool| {
            if std::mem::take(shown) {
                eprint!("\r                    \r");
            }
        };
        loop {
            let tick = async {
                match countdown {
                    Some(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = chat.next_event() => match event {
                    None => break,
                    Some(Event::BatchWaiting { wait_ms }) => {
                        let wait = std::time::Duration::from_millis(wait_ms);
                        countdown = Some(tokio::time::Instant::now() + wait);
                    }
                    Some(Event::BatchAnswered { .. }) => {
                        countdown = None;
                        clear(&mut shown);
                    }
                    Some(Event::Reply { content, .. }) => {
                        clear(&mut shown);
                        println!("{agent} › {}", visible(&content));
                        let _ = std::io::stdout().flush();
                    }
                    Some(Event::Warning { message }) => {
                        clear(&mut shown);
                        eprintln!("warning: {}", visible(&message));
                    }
                    Some(Event::Error { message }) => {
                        countdown = None;
                        clear(&mut shown);
                        eprintln!("error: {}", visible(&message));
                    }
                    Some(_) => {}
                },
                () = tick => {}
            }
            if let Some(at) = countdown {
                let left = at.saturating_duration_since(tokio::time::Instant::now());
                eprint!("\r  thinking… {} s ", left.as_secs_f64().ceil() as u64);
                shown = true;
            }
        }
    });
    if let Err(e) = rt.block_on(chat.finish()) {
        eprintln!("warning: {e}");
    }
    eprintln!("\nsession {session} saved; continue with: nop chat --session {session}");
    Ok(ExitCode::SUCCESS)
}
