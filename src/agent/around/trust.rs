//! Trust (`crate::trust`) as a per-run behaviour: what the run leaves out because the user has
//! not trusted it is said as the session opens (`agent/untrusted.rs`). Leaving it out is not
//! done here: each use decides for itself, when it happens.

use futures_util::future::BoxFuture;

use super::{Around, Opening};
use crate::workspace::Workspace;

/// Says what of the repository is untrusted as a run opens.
pub(in crate::agent) struct Trust {
    ws: Workspace,
    env: std::collections::BTreeMap<String, String>,
}

impl Trust {
    pub fn new(ws: Workspace, env: std::collections::BTreeMap<String, String>) -> Trust {
        Trust { ws, env }
    }
}

impl Around for Trust {
    fn on_open<'a>(&'a mut self, opening: &'a mut Opening<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            crate::agent::untrusted::report(&self.ws, &self.env, opening.events);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fixture::Fixture;
    use crate::hooks::Mode;
    use crate::protocol::events::Event;

    #[tokio::test]
    async fn a_server_the_user_never_trusted_is_named_as_the_run_opens() {
        let mut f = Fixture::new();
        std::fs::write(
            f.dir.path().join(".mcp.json"),
            r#"{"mcpServers": {"planted": {"command": "./run-me.sh"}}}"#,
        )
        .expect("write");
        let state = f.dir.path().join("state");
        let env = std::collections::BTreeMap::from([(
            "XDG_STATE_HOME".to_string(),
            state.display().to_string(),
        )]);
        let mut trust = Trust::new(f.runtime.workspace().clone(), env);
        let mut opening = Opening {
            session_id: "s1",
            agent: "coder",
            resumed: false,
            mode: Mode::Run(None),
            events: &f.events,
            run: None,
        };
        trust.on_open(&mut opening).await;
        let mut named = Vec::new();
        while let Ok(event) = f.seen.try_recv() {
            if let Event::Untrusted { name, kind, .. } = event {
                named.push((kind, name));
            }
        }
        assert!(
            named
                .iter()
                .any(|(kind, name)| kind == "mcp-server" && name.contains("`planted`")),
            "{named:?}"
        );
    }
}
