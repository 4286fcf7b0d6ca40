//! What a run leaves out because the user has not trusted it (`crate::trust`): each subject of
//! the repository that would run outside the sandbox or widen the agent's rules, new or changed
//! since the user trusted it, said once as the run opens (an `untrusted` event: a warning on a
//! terminal, a line of stream-json headless). Leaving it out is not done here: each use decides
//! for itself, when it happens (hooks as they fire, servers as they start, the workspace's
//! settings and rules as they are read).

use crate::protocol::events::Event;
use crate::workspace::Workspace;

use super::turn::EventSink;

/// Sends an `untrusted` event for each subject of `ws` a run would use but may not, once per
/// process for the same message (an interactive session runs a run per prompt).
pub(super) fn report(
    ws: &Workspace,
    env: &std::collections::BTreeMap<String, String>,
    events: &EventSink,
) {
    let (base, mut found) = crate::trust::review(&ws.root, env);
    let record = crate::trust::Record::load(crate::trust::Store::from_env(env).as_ref(), &base);
    let nested: Vec<_> = ws
        .set_aside
        .iter()
        .filter_map(|dir| crate::trust::workspace(dir, &base))
        .collect();
    found.extend(record.untrusted(&nested));
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    for untrusted in found {
        let mut message = untrusted.warning();
        if nested.contains(&untrusted.subject) {
            message = format!(
                "{message}; nop works in {} instead, under its rules",
                ws.root.display()
            );
        }
        tracing::warn!(op = "trust", result = "left out", "{message}");
        let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
        if said.contains(&message) {
            continue;
        }
        said.push(message.clone());
        drop(said);
        let _ = events.send(Event::Untrusted {
            kind: untrusted.subject.kind.as_str().to_string(),
            name: untrusted.subject.name.clone(),
            files: untrusted.subject.files(),
            why: untrusted.why.as_str().to_string(),
            message,
        });
    }
}
