//! Unit-test support for the engine's core: a repository with nop's defaults installed, a
//! runtime and an engine on it whose provider is never reached (its tests fake the model or
//! make no request), and sessions made in its store as nop makes them.

use std::collections::BTreeMap;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::engine::{Engine, QueueSettings};
use super::runtime::Runtime;
use super::turn::EventSink;
use crate::protocol::events::Event;
use crate::protocol::{Message, Role};
use crate::tools::ToolContext;

/// A repository with `.nop/` installed, its runtime and an engine.
pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    pub runtime: Runtime,
    pub engine: Engine,
    pub events: EventSink,
    pub seen: tokio::sync::mpsc::UnboundedReceiver<Event>,
}

impl Fixture {
    /// A fresh repository under /var/tmp/nop-tests (not /tmp: a writable root by design).
    pub fn new() -> Fixture {
        std::fs::create_dir_all("/var/tmp/nop-tests").expect("/var/tmp/nop-tests");
        let dir = tempfile::tempdir_in("/var/tmp/nop-tests").expect("temp");
        crate::workspace::init(dir.path(), false, Utc::now()).expect("nop init");
        let ws = crate::workspace::Workspace::discover(dir.path(), None).expect("workspace");
        let mut config = crate::config::Config::default();
        config.provider.model = Some("m".into());
        // Nothing listens there: a request would fail, and none is made.
        config.provider.base_url = Some("http://127.0.0.1:9/v1".into());
        config.advisors.enabled = false;
        let env = BTreeMap::from([("NOP_API_KEY".to_string(), "k".to_string())]);
        let approver =
            crate::permissions::Approver::headless(crate::permissions::ApprovalMode::Never, false);
        let runtime = Runtime::new(ws, config, env, approver, "me".into());
        let (events, seen) = tokio::sync::mpsc::unbounded_channel();
        let engine = Engine::new(
            runtime.workspace().clone(),
            runtime.cwd().to_path_buf(),
            runtime.config().clone(),
            runtime.store().clone(),
            runtime.provider().expect("provider"),
            runtime.approver().clone(),
            events.clone(),
            QueueSettings {
                stop_words: runtime.config().queue.stop_words.clone(),
                interrupt_enabled: true,
                ..QueueSettings::default()
            },
        );
        Fixture {
            dir,
            runtime,
            engine,
            events,
            seen,
        }
    }

    /// A new session of `coder` holding `messages` (role, text), and its tools' context.
    pub fn session(&self, messages: &[(Role, &str)]) -> ToolContext {
        let store = self.runtime.store();
        let id = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        let messages: Vec<Message> = messages
            .iter()
            .map(|(role, text)| Message::new(*role, *text, Utc::now()))
            .collect();
        store
            .update(&id, Utc::now(), |state| {
                state.session.messages.extend(messages);
                Ok(())
            })
            .expect("write");
        self.engine
            .tool_context(&id, "coder", Vec::new(), 0, CancellationToken::new(), false)
            .expect("context")
    }

    /// What session `id` holds: each message's role and text.
    pub fn messages(&self, id: &str) -> Vec<(Role, String)> {
        let state = self.runtime.store().read(id).expect("read");
        state
            .session
            .messages
            .iter()
            .map(|m| (m.role, m.content.clone()))
            .collect()
    }

    /// Queues `text` for session `id`, as `nop send` does.
    pub fn queue(&self, id: &str, text: &str) {
        crate::queue::post(
            &self.runtime.store().dir(id),
            id,
            "me",
            text,
            crate::protocol::QueuePriority::Normal,
            &self.runtime.config().queue.stop_words,
        )
        .expect("queue");
    }
}
