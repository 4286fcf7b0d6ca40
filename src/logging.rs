//! `tracing` to `.nop/logs/system.log` and to each session's `session.log` (seed 002 §9.3).
//!
//! One line per event: time, level, then `session=`, `agent=`, `op=`, `result=` when the event or
//! an enclosing span carries them, then the message and any other fields:
//!
//! ```text
//! 2026-11-22T00:35:12.123Z INFO session=01kaq3m7x2-4hzc agent=coder op=fork result=ok forked child=01kaq3m9a0-1b2c
//! ```
//!
//! An event that names a session is written to that session's session.log as well as to
//! system.log. Lines are written whole with O_APPEND, so several processes can share the files.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::config::LogLevel;

/// The fields that lead every line, in this order.
const LEADING: [&str; 4] = ["session", "agent", "op", "result"];

/// Installs the global subscriber writing to `logs_dir/system.log` and to
/// `sessions_dir/<id>/session.log`. Without a workspace nothing is logged.
pub fn init(dirs: Option<(&Path, &Path)>, level: LogLevel) {
    let Some((logs_dir, sessions_dir)) = dirs else {
        return;
    };
    let system = std::fs::create_dir_all(logs_dir)
        .and_then(|()| open_append(&logs_dir.join("system.log")))
        .ok();
    let layer = FileLayer {
        max: match level {
            LogLevel::Error => Level::ERROR,
            LogLevel::Warn => Level::WARN,
            LogLevel::Info => Level::INFO,
            LogLevel::Debug => Level::DEBUG,
        },
        system: Mutex::new(system),
        sessions_dir: sessions_dir.to_path_buf(),
    };
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

struct FileLayer {
    max: Level,
    system: Mutex<Option<File>>,
    sessions_dir: PathBuf,
}

/// Fields recorded on a span, kept in its extensions.
#[derive(Default)]
struct Fields(Vec<(&'static str, String)>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field.name(), format!("{value:?}"));
    }
}

impl Fields {
    fn set(&mut self, name: &'static str, value: String) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl<S> Layer<S> for FileLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        *metadata.level() <= self.max
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        // Inner spans first, so the closest value of a field wins.
        let mut inherited = Fields::default();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                if let Some(span_fields) = span.extensions().get::<Fields>() {
                    for (name, value) in &span_fields.0 {
                        if fields.get(name).is_none() && inherited.get(name).is_none() {
                            inherited.set(name, value.clone());
                        }
                    }
                }
            }
        }
        fields.0.extend(inherited.0);

        let mut line = format!(
            "{} {}",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            event.metadata().level()
        );
        for name in LEADING {
            if let Some(value) = fields.get(name) {
                let _ = write!(line, " {name}={value}");
            }
        }
        if let Some(message) = fields.get("message") {
            let _ = write!(line, " {message}");
        }
        for (name, value) in &fields.0 {
            if !LEADING.contains(name) && *name != "message" {
                let _ = write!(line, " {name}={value}");
            }
        }
        line.push('\n');

        if let Ok(mut system) = self.system.lock()
            && let Some(file) = system.as_mut()
        {
            let _ = file.write_all(line.as_bytes());
        }
        if let Some(session) = fields.get("session") {
            let dir = self.sessions_dir.join(session);
            // Never create a directory for a session that does not exist.
            if crate::protocol::ids::looks_like_id(session) && dir.is_dir() {
                let _ = open_append(&dir.join(crate::session::SESSION_LOG))
                    .and_then(|mut f| f.write_all(line.as_bytes()));
            }
        }
    }
}
