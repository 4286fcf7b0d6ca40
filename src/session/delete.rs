//! Deleting a session (seed 002 §8.1 "删除操作需要先检查引用关系"): only once no other session
//! refers to it, unless forced; never while a process runs it or holds its lock; and atomically,
//! so that a crash leaves the session whole or gone, never half a session.
//!
//! References are one-way (seed 002 §7.2): a fork names its parent (`parentSession.id`), a
//! subagent or advisor its caller (`caller.sessionId`); so finding them means reading every other
//! session. A forced delete never breaks a fork: the snapshot it came from lives in its own
//! directory (a hard link made by `fork`, added here for a fork that lacks one), so snapshots
//! live on wherever a session references them (seed 002 §7.3).

use std::fs;
use std::path::PathBuf;

use serde::Serialize;

use super::atomic::{self, TEMP_PREFIX};
use super::error::{Reference, ReferenceKind, Result, SessionError};
use super::lock::{LockKind, SessionLock};
use super::run_lock::RunGuard;
use super::snapshot_file_name;
use super::store::{Store, read_session_json};

/// What [`Store::delete`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    pub id: String,
    /// The sessions that referred to it (only a forced delete has any).
    pub referenced_by: Vec<Reference>,
    /// nop's advisor sessions for it, deleted with it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub with: Vec<String>,
    /// The session was gone from the store, but its renamed directory could not be removed (it
    /// is a `.tmp-*` entry that the next write of any nop process removes): the path and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leftover: Option<(PathBuf, String)>,
}

impl Store {
    /// The other sessions that refer to session `id`, oldest first. Reads their session.json
    /// without their locks (a lock is never taken while another session's is held, and the
    /// files are replaced atomically, so a read sees a whole file).
    pub fn references_to(&self, id: &str) -> Result<Vec<Reference>> {
        let mut found = Vec::new();
        for other in self.ids()? {
            if other == id {
                continue;
            }
            match read_session_json(&self.dir(&other), &other) {
                Ok(session) => {
                    if let Some(parent) = session.parent_session.filter(|p| p.id == id) {
                        found.push(Reference {
                            id: other.clone(),
                            kind: ReferenceKind::Fork,
                            snapshot_id: Some(parent.snapshot_id),
                            error: None,
                        });
                    }
                    if let Some(caller) = session.caller.filter(|c| c.session_id == id) {
                        found.push(Reference {
                            id: other,
                            kind: if caller.advisor {
                                ReferenceKind::Advisor
                            } else {
                                ReferenceKind::Subagent
                            },
                            snapshot_id: None,
                            error: None,
                        });
                    }
                }
                // Removed meanwhile: it refers to nothing any more.
                Err(SessionError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => found.push(Reference {
                    id: other,
                    kind: ReferenceKind::Unreadable,
                    snapshot_id: None,
                    error: Some(e.to_string()),
                }),
            }
        }
        Ok(found)
    }

    /// Deletes session `id`. Refused while a process runs it (its run lock) and, unless `force`,
    /// while another session refers to it ([`SessionError::Referenced`]). Holds the session's
    /// write lock throughout (a holder elsewhere makes it a lock timeout naming its pid). The
    /// directory is first renamed to a `.tmp-*` name in the sessions directory, held with a
    /// `flock`, then removed: a crash at any point leaves the session whole, or an abandoned
    /// temporary entry that `sessions list` never shows and the next write removes.
    pub fn delete(&self, id: &str, force: bool) -> Result<Deleted> {
        let (mut deleted, advisors) = self.delete_alone(id, force)?;
        // nop's own consultations go with the session they were for, once its locks are let
        // go (a crash between them leaves advisor sessions whose caller is gone: nothing refers
        // to them, and deleting them later is never refused).
        for advisor in advisors {
            if self.delete(&advisor.id, false).is_ok() {
                deleted.with.push(advisor.id);
            }
        }
        Ok(deleted)
    }

    /// [`Store::delete`] of the session alone; the advisor sessions consulted for it.
    fn delete_alone(&self, id: &str, force: bool) -> Result<(Deleted, Vec<Reference>)> {
        let dir = self.existing_dir(id)?;
        self.sweep();
        let _run = match RunGuard::try_acquire(&dir) {
            Ok(Some(guard)) => guard,
            Ok(None) => return Err(SessionError::Running(id.to_string())),
            Err(e) => return Err(SessionError::io(dir.join("run.lock"))(e)),
        };
        let _lock = SessionLock::acquire(&dir, id, LockKind::Exclusive, self.lock_timeout())?;
        let (advisors, references): (Vec<Reference>, Vec<Reference>) = self
            .references_to(id)?
            .into_iter()
            .partition(|r| r.kind == ReferenceKind::Advisor);
        if !references.is_empty() && !force {
            return Err(SessionError::Referenced {
                session: id.to_string(),
                references,
            });
        }
        for fork in references.iter().filter(|r| r.kind == ReferenceKind::Fork) {
            if let Some(snapshot) = &fork.snapshot_id {
                self.give_own_snapshot(&dir, &fork.id, snapshot)?;
            }
        }
        // Held from before the rename to the end, so that no sweep takes the renamed directory
        // for a killed process's leftover while it is being removed.
        let hold = fs::File::open(&dir).map_err(SessionError::io(&dir))?;
        hold.lock().map_err(SessionError::io(&dir))?;
        let gone = self.sessions_dir().join(format!(
            "{TEMP_PREFIX}deleted-{id}-{}",
            crate::protocol::new_id()
        ));
        fs::rename(&dir, &gone).map_err(SessionError::io(&dir))?;
        atomic::sync_dir(self.sessions_dir())?;
        let leftover = fs::remove_dir_all(&gone)
            .err()
            .map(|e| (gone.clone(), e.to_string()));
        drop(hold);
        let deleted = Deleted {
            id: id.to_string(),
            referenced_by: references,
            with: Vec::new(),
            leftover,
        };
        Ok((deleted, advisors))
    }

    /// Makes sure fork `child` holds its own copy of snapshot `snapshot` of the session in
    /// `parent_dir` (forks made by `fork` do; one made otherwise may not). Snapshots are
    /// immutable and created with create-new semantics, so adding one to another session needs
    /// no lock of its: it cannot clash with anything that session's writers do.
    fn give_own_snapshot(
        &self,
        parent_dir: &std::path::Path,
        child: &str,
        snapshot: &str,
    ) -> Result<()> {
        let name = snapshot_file_name(snapshot);
        let child_dir = self.dir(child);
        let target = child_dir.join(&name);
        let source = parent_dir.join(&name);
        if target.exists() || !source.exists() {
            // Already independent, or already broken (`nop sessions check` says so).
            return Ok(());
        }
        match fs::hard_link(&source, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
            Err(_) => {
                let contents = fs::read(&source).map_err(SessionError::io(&source))?;
                atomic::create_new_atomic(&target, &contents, true)?;
            }
        }
        atomic::sync_dir(&child_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Caller;
    use chrono::Utc;
    use pretty_assertions::assert_eq;

    /// A session called by `caller`, as an advisor or as a subagent.
    fn called_by(store: &Store, caller: &str, advisor: bool) -> String {
        let id = store.create("x", Utc::now()).expect("create").session_id;
        store
            .update(&id, Utc::now(), |state| {
                state.session.caller = Some(Caller {
                    session_id: caller.to_string(),
                    agent: "coder".into(),
                    depth: 1,
                    advisor,
                });
                Ok(())
            })
            .expect("caller");
        id
    }

    #[test]
    fn advisor_sessions_go_with_their_caller_and_a_subagent_still_holds_it() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::new(
            dir.path().join("sessions"),
            std::time::Duration::from_secs(5),
        );
        let run = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        let (a, b) = (called_by(&store, &run, true), called_by(&store, &run, true));
        let deleted = store.delete(&run, false).expect("deleted");
        let mut with = deleted.with.clone();
        with.sort();
        let mut advisors = vec![a.clone(), b.clone()];
        advisors.sort();
        assert_eq!(with, advisors);
        assert!(deleted.referenced_by.is_empty());
        assert_eq!(store.ids().expect("ids"), Vec::<String>::new());
        // A subagent the agent called is the user's to keep: it refuses the delete.
        let run = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        let advisor = called_by(&store, &run, true);
        let subagent = called_by(&store, &run, false);
        let Err(SessionError::Referenced { references, .. }) = store.delete(&run, false) else {
            panic!("not refused");
        };
        assert_eq!(references.len(), 1);
        assert_eq!(references[0].id, subagent);
        assert!(store.dir(&advisor).is_dir(), "nothing deleted on a refusal");
    }
}
