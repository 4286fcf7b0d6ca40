//! Sessions a test starts from (to resume, compact, fork, summarise or list), made as nop makes
//! them: `nop sessions new` and one `nop sessions append` a message; what only a run records
//! (when the session began, which session called it) or a user sets (its configuration) is then
//! written through nop's own store. `repo.session().user("fix it").assistant("fixed").write()`.

use chrono::{DateTime, Utc};
use nop::protocol::Caller;
use serde_json::Value;

use super::Repo;

/// A session to write; [`SessionBuilder::write`] makes it and returns its id.
pub struct SessionBuilder<'r> {
    repo: &'r Repo,
    agent: Option<String>,
    /// (role, text), in order.
    messages: Vec<(&'static str, String)>,
    created_at: Option<DateTime<Utc>>,
    caller: Option<String>,
    config: Vec<(String, Value)>,
}

impl<'r> SessionBuilder<'r> {
    pub fn new(repo: &'r Repo) -> SessionBuilder<'r> {
        SessionBuilder {
            repo,
            agent: None,
            messages: Vec::new(),
            created_at: None,
            caller: None,
            config: Vec::new(),
        }
    }

    /// The session's agent (`sessions new --agent`); without it, the configured default.
    pub fn agent(mut self, name: &str) -> Self {
        self.agent = Some(name.to_string());
        self
    }

    pub fn system(self, text: impl Into<String>) -> Self {
        self.message("system", text.into())
    }

    pub fn user(self, text: impl Into<String>) -> Self {
        self.message("user", text.into())
    }

    pub fn assistant(self, text: impl Into<String>) -> Self {
        self.message("assistant", text.into())
    }

    /// `n` messages, the user's and the assistant's in turn (the user's first), the `i`-th
    /// saying `text(i)`.
    pub fn alternating(self, n: usize, text: impl Fn(usize) -> String) -> Self {
        (0..n).fold(self, |b, i| match i % 2 {
            0 => b.user(text(i)),
            _ => b.assistant(text(i)),
        })
    }

    /// Begun at `at` (RFC 3339), as if made then: its `createdAt`, which days of memory go by.
    pub fn created_at(mut self, at: &str) -> Self {
        let at = DateTime::parse_from_rfc3339(at).expect("an RFC 3339 time");
        self.created_at = Some(at.with_timezone(&Utc));
        self
    }

    /// A subagent's session called by session `caller` (as `call-agent` records it): `caller`'s
    /// agent, one level below it.
    pub fn called_by(mut self, caller: &str) -> Self {
        self.caller = Some(caller.to_string());
        self
    }

    /// A session-level configuration override (session.json's `config`, dotted `key`).
    pub fn config(mut self, key: &str, value: Value) -> Self {
        self.config.push((key.to_string(), value));
        self
    }

    fn message(mut self, role: &'static str, text: String) -> Self {
        self.messages.push((role, text));
        self
    }

    /// Writes the session and returns its id.
    pub fn write(self) -> String {
        let mut new = vec!["sessions", "new"];
        if let Some(agent) = &self.agent {
            new.extend(["--agent", agent]);
        }
        let id = self.repo.run(&new).trim().to_string();
        for (role, text) in &self.messages {
            self.repo
                .run(&["sessions", "append", &id, "--role", role, text]);
        }
        if self.created_at.is_none() && self.caller.is_none() && self.config.is_empty() {
            return id;
        }
        let store = self.repo.store();
        let caller = self.caller.map(|caller| {
            let called = store.read_recent(&caller).expect("the caller").session;
            Caller {
                advisor: false,
                depth: called.caller.map_or(0, |c| c.depth) + 1,
                session_id: called.session_id,
                agent: called.agent,
            }
        });
        store
            .update(&id, Utc::now(), |recent| {
                let session = &mut recent.session;
                if let Some(at) = self.created_at {
                    session.created_at = at;
                }
                session.caller = caller;
                session.config.extend(self.config);
                Ok(())
            })
            .expect("update the session");
        id
    }
}
