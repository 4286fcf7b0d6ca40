//! First contact: `nop` on a terminal with no model configured asks for the provider, the model
//! and (for a remote provider with no key in the environment) the name of the variable that
//! holds the key, and writes them to the user's configuration with `nop config set … --user`.

use std::process::ExitCode;

use anyhow::Result;

use super::context::{Context, Invocation};

/// How first contact ended.
pub enum Setup {
    /// Configured: open the repository again with it.
    Ready(Invocation),
    /// Not (cancelled, or the key is still to be exported): leave with this code.
    Leave(ExitCode),
}

/// Whether `ctx` has a model to talk to.
pub fn has_model(ctx: &Context) -> bool {
    ctx.config()
        .provider
        .model
        .as_deref()
        .is_some_and(|m| !m.trim().is_empty())
}

/// Asks on the terminal and writes the answers to the user's configuration.
pub fn first_contact(ctx: Context) -> Result<Setup> {
    super::term::style::say(
        "No model is configured yet. nop asks for the provider and the model (and, if it finds \
         no key, where your key is) and keeps them in your user configuration.",
    );
    let mut editor = rustyline::DefaultEditor::new()?;
    let Some(provider) = ask(
        &mut editor,
        "provider (openai or anthropic) [openai]: ",
        |a| match a {
            "" | "openai" => Some("openai"),
            "anthropic" => Some("anthropic"),
            _ => None,
        },
    )?
    else {
        return Ok(Setup::Leave(cancelled()));
    };
    let example = if provider == "anthropic" {
        "claude-sonnet-4-5"
    } else {
        // The model the README's first command sets.
        "gpt-4.1"
    };
    let Some(model) = ask(&mut editor, &format!("model (such as {example}): "), |a| {
        (!a.is_empty() && !a.contains(char::is_whitespace)).then_some(a)
    })?
    else {
        return Ok(Setup::Leave(cancelled()));
    };
    let inv = ctx.into_invocation();
    let mut out = std::io::stderr();
    super::config::set(&inv, "provider", &provider, true, &mut out)?;
    super::config::set(&inv, "model", &model, true, &mut out)?;

    let reopened = inv.clone().open()?;
    let provider_config = &reopened.config().provider;
    let defaults = if provider == "anthropic" {
        ["NOP_API_KEY", "ANTHROPIC_API_KEY"]
    } else {
        ["NOP_API_KEY", "OPENAI_API_KEY"]
    };
    let has_key = |var: &str| inv.env.get(var).is_some_and(|v| !v.trim().is_empty());
    let local = provider_config
        .base_url
        .as_deref()
        .is_some_and(nop::providers::is_local_url);
    if local || provider_config.api_key_env.as_deref().is_some_and(has_key) {
        return Ok(Setup::Ready(inv));
    }
    if provider_config.api_key_env.is_none() && defaults.iter().any(|v| has_key(v)) {
        return Ok(Setup::Ready(inv));
    }
    // Short enough for one row at 80 columns.
    let question = format!("variable that holds your API key [{}]: ", defaults[1]);
    let Some(var) = ask(&mut editor, &question, |a| {
        let a = if a.is_empty() { defaults[1] } else { a };
        a.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
            .then_some(a)
    })?
    else {
        return Ok(Setup::Leave(cancelled()));
    };
    if !defaults.contains(&var.as_str()) {
        super::config::set(&inv, "api_key_env", &var, true, &mut out)?;
    }
    if has_key(&var) {
        return Ok(Setup::Ready(inv));
    }
    super::term::style::say(&format!(
        "{var} is not set here: export {var}=… and start nop again."
    ));
    Ok(Setup::Leave(ExitCode::SUCCESS))
}

/// Asks `question` until `accept` takes the answer (trimmed); `None` on Ctrl-C or Ctrl-D.
fn ask(
    editor: &mut rustyline::DefaultEditor,
    question: &str,
    accept: impl Fn(&str) -> Option<&str>,
) -> Result<Option<String>> {
    loop {
        match editor.readline(question) {
            Ok(line) => match accept(line.trim()) {
                Some(answer) => return Ok(Some(answer.to_string())),
                None => eprintln!("not that: try again (Ctrl-C to leave)"),
            },
            Err(
                rustyline::error::ReadlineError::Interrupted | rustyline::error::ReadlineError::Eof,
            ) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

fn cancelled() -> ExitCode {
    eprintln!("nothing written; {}", nop::providers::NO_MODEL_HINT);
    ExitCode::from(super::exit::ERROR)
}
