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
