//! `nop memory …`: list, show, pop, restore, search and summarize long-term memory.

use std::process::ExitCode;

use anyhow::Result;
use chrono::NaiveDate;
use tokio_util::sync::CancellationToken;

use super::MemoryCommand;
use super::context::Context;
use super::run::tokio_runtime;
use super::term::style::{json_safe, visible};
use nop::memory::MemoryStore;

/// `nop memory …`; an agent not given is `agent.default`.
pub fn memory(ctx: &Context, command: MemoryCommand) -> Result<ExitCode> {
    let store = MemoryStore::new(&ctx.ws.nop_dir());
    let default_agent = ctx.config().agent.default.clone();
    let today = chrono::Local::now().date_naive();
    let or_default = |agent: Option<String>| agent.unwrap_or(default_agent.clone());
    match command {
        MemoryCommand::List { agent, all, json } => list(&store, or_default(agent), all, json)?,
        MemoryCommand::Show { agent, id, json } => show(ctx, &store, or_default(agent), id, json)?,
        MemoryCommand::Pop { agent, id, json } => pop(ctx, &store, or_default(agent), id, json)?,
        MemoryCommand::Restore { agent, json } => restore(ctx, &store, or_default(agent), json)?,
        MemoryCommand::Search { query, agent, json } => search(&store, &query, agent, today, json)?,
        MemoryCommand::Summarize { agent, date, json } => {
            summarize(ctx, or_default(agent), date, today, json)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print(value: &serde_json::Value) {
    println!(
        "{}",
        json_safe(serde_json::to_string_pretty(value).unwrap_or_default())
    )
}

fn list(store: &MemoryStore, agent: String, all: bool, json: bool) -> Result<()> {
    let entries: Vec<nop::memory::Entry> = store
        .load(&agent)?
        .map(|m| {
            m.entries
                .into_iter()
                .filter(|e| all || !e.is_deleted())
                .collect()
        })
        .unwrap_or_default();
    if json {
        print(&serde_json::json!(entries));
    } else if entries.is_empty() {
        println!("no memory for {agent} yet (nop memory summarize --agent {agent})");
    } else {
        for e in &entries {
            let state = match (&e.deleted_at, &e.deleted_by) {
                (Some(at), by) => format!(
                    "  [removed {} by {}]",
                    at.format("%Y-%m-%d %H:%M"),
                    by.as_deref().unwrap_or("?")
                ),
                _ => String::new(),
            };
            let summary: String = e.index.summary.chars().take(100).collect();
            println!("{}  {}  {}{state}", e.id, e.summary_date, visible(&summary));
        }
    }
    Ok(())
}

fn show(
    ctx: &Context,
    store: &MemoryStore,
    agent: String,
    id: Option<String>,
    json: bool,
) -> Result<()> {
    let ws = &ctx.ws;
    let memory = store.load(&agent)?;
    match id {
        Some(id) => {
            let entry = memory
                .and_then(|m| m.entries.into_iter().find(|e| e.id.starts_with(&id)))
                .ok_or_else(|| anyhow::anyhow!("{agent} has no summary `{id}`"))?;
            if json {
                print(&serde_json::json!(entry));
            } else {
                println!(
                    "{} · {} · {} messages ({} from the user)",
                    entry.id,
                    entry.summary_date,
                    entry.index.message_count,
                    entry.index.user_message_count
                );
                println!("{}", visible(&entry.index.summary));
                println!(
                    "topics: {}\nkey points: {}\nkeywords: {}",
                    visible(&entry.index.topics.join(", ")),
                    visible(&entry.index.key_points.join("; ")),
                    visible(&entry.index.keywords.join(", "))
                );
            }
        }
        None => {
            let initial = nop::agent::summarize::initial_prompt(ws, &agent);
            let prompt = memory
                .map(|m| m.current_prompt(&initial))
                .unwrap_or(initial);
            if json {
                print(&serde_json::json!({"agent": agent, "currentPrompt": prompt}));
            } else {
                println!("{}", visible(&prompt));
            }
        }
    }
    Ok(())
}

fn pop(
    ctx: &Context,
    store: &MemoryStore,
    agent: String,
    id: Option<String>,
    json: bool,
) -> Result<()> {
    let (ws, user) = (&ctx.ws, ctx.user.as_str());
    let popped = store.pop(&agent, id.as_deref(), user, chrono::Utc::now())?;
    let entry = &popped.entry;
    tracing::info!(agent = %agent, op = "memory", result = "removed", entry = %entry.id, by = user, "summary removed");
    let remaining = popped.remaining_count();
    let initial = nop::agent::summarize::initial_prompt(ws, &agent);
    let preview = nop::memory::prompt_preview(
        &popped.after.current_prompt(&initial),
        nop::memory::PROMPT_PREVIEW_CHARS,
    );
    if json {
        // The entry as `memory list` shows it, with the seed's result fields (§3.1).
        let mut value = serde_json::json!(entry);
        if let Some(object) = value.as_object_mut() {
            object.insert("success".into(), serde_json::json!(true));
            object.insert(
                "deleted_summary_date".into(),
                serde_json::json!(entry.summary_date),
            );
            object.insert("remaining_count".into(), serde_json::json!(remaining));
            object.insert("current_prompt_preview".into(), serde_json::json!(preview));
        }
        print(&value);
    } else {
        let left = match remaining {
            0 => "no summary remains: the prompt is the initial prompt".to_string(),
            1 => "1 summary remains".to_string(),
            n => format!("{n} summaries remain"),
        };
        println!(
            "removed {} ({}); `nop memory restore` brings it back\n{left}; the current prompt ends:\n{preview}",
            entry.id,
            entry.summary_date,
            preview = visible(&preview)
        );
    }
    Ok(())
}

fn restore(ctx: &Context, store: &MemoryStore, agent: String, json: bool) -> Result<()> {
    let user = ctx.user.as_str();
    let entry = store.restore(&agent)?;
    tracing::info!(agent = %agent, op = "memory", result = "restored", entry = %entry.id, by = user, "summary restored");
    if json {
        print(&serde_json::json!(entry));
    } else {
        println!("restored {} ({})", entry.id, entry.summary_date);
    }
    Ok(())
}

fn search(
    store: &MemoryStore,
    query: &str,
    agent: Option<String>,
    today: NaiveDate,
    json: bool,
) -> Result<()> {
    let hits = store.search(agent.as_deref(), query, today)?;
    if json {
        print(&serde_json::json!(hits));
    } else if hits.is_empty() {
        println!("no matches");
    } else {
        for h in &hits {
            let summary: String = h.entry.summary.chars().take(120).collect();
            println!(
                "{}  {:<12} {:>6.2}  {}",
                h.entry.date,
                h.agent,
                h.score,
                visible(&summary)
            );
        }
    }
    Ok(())
}

fn summarize(
    ctx: &Context,
    agent: String,
    date: Option<String>,
    today: NaiveDate,
    json: bool,
) -> Result<()> {
    let (ws, config, env) = (&ctx.ws, ctx.config(), &ctx.env);
    let date = match date.as_deref() {
        None => today - chrono::Duration::days(1),
        Some(text) => match nop::memory::dates::parse(text, today).0.as_slice() {
            [range] if range.from == range.to => range.from,
            _ => {
                anyhow::bail!("--date {text}: give one day (an ISO date, \"yesterday\", \"昨天\"…)")
            }
        },
    };
    let provider = nop::providers::Provider::from_config(&config.provider, env)?;
    let rt = tokio_runtime()?;
    let summary = rt.block_on(nop::agent::summarize::summarize_day(
        ws,
        config,
        &provider,
        &agent,
        date,
        &CancellationToken::new(),
    ))?;
    for line in &summary.left_out {
        eprintln!("warning: left out of the summary: {}", visible(line));
    }
    match (summary.entry, json) {
        (Some(e), true) => print(&serde_json::json!(e)),
        (Some(e), false) => println!(
            "summarised {date} for {agent} as {}: {}",
            e.id,
            visible(&e.index.summary)
        ),
        (None, true) => print(&serde_json::json!(null)),
        (None, false) => println!("{agent} had no sessions on {date}"),
    }
    Ok(())
}
