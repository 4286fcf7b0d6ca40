//! Putting files back from checkpoints: `nop undo` (the changes of the last run that changed
//! files, or of run N) and `nop rewind` (a snapshot's files, conversation, or both). Only what
//! nop's runs changed is put back; a path someone else changed since is kept and named, unless
//! the caller forces it, and a refusal names the command that goes on from there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{CheckpointError, Checkpoints, Result};
use crate::protocol::{Message, Role, SessionStatus, TurnCheckpoint};
use crate::session::Store;

/// What putting files back did.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Restored {
    /// Written back as the checkpoint held them.
    pub restored: Vec<String>,
    /// Removed: the checkpoint did not have them.
    pub removed: Vec<String>,
    /// Changed since by someone other than nop's runs: left as they are (`--force` overwrites).
    pub kept: Vec<String>,
    /// Could not be put back safely, each with why.
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

impl Restored {
    /// For the conversation: what changed, in a line or two.
    fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (what, paths) in [
            ("restored", &self.restored),
            ("removed", &self.removed),
            ("kept as the user left them", &self.kept),
        ] {
            if !paths.is_empty() {
                parts.push(format!("{what}: {}", list(paths)));
            }
        }
        if !self.skipped.is_empty() {
            let skipped: Vec<String> = self.skipped.iter().map(|s| s.path.clone()).collect();
            parts.push(format!(
                "left alone (the rules protect them): {}",
                list(&skipped)
            ));
        }
        if parts.is_empty() {
            "no file needed to change".to_string()
        } else {
            parts.join("; ")
        }
    }
}

fn list(paths: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut text = paths
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    text
}

impl Checkpoints {
    /// Puts `paths` back as they are in tree `target`: written, or removed where `target` does
    /// not have them. Only paths `policy` (the session's agent's rules) lets the agent write
    /// are touched: nop does outside the sandbox nothing the agent could not have done in it,
    /// so nothing the agent planted restores or removes what the rules protect. The others are
    /// named in `skipped`. The caller holds the session's run lock, so no agent works meanwhile.
    pub fn restore(
        &self,
        target: &str,
        paths: &BTreeSet<String>,
        policy: &crate::permissions::Policy,
    ) -> Result<Restored> {
        let mut done = Restored::default();
        let mut allowed = BTreeSet::new();
        // Judged as the tree names them: git replaces a symbolic link on the way rather than
        // write through it, and `remove` refuses to go through one.
        for path in paths {
            match policy.check_resolved(&self.root.join(path), crate::permissions::Access::Write) {
                crate::permissions::Decision::Allow { .. } => {
                    allowed.insert(path.clone());
                }
                crate::permissions::Decision::Deny { reason, .. } => done.skipped.push(Skipped {
                    path: path.clone(),
                    reason: format!("the agent's rules do not let it write here: {reason}"),
                }),
                crate::permissions::Decision::Ask { .. } => done.skipped.push(Skipped {
                    path: path.clone(),
                    reason: "the agent's rules ask before it writes here; put it back by hand"
                        .to_string(),
                }),
            }
        }
        let paths = &allowed;
        if paths.is_empty() {
            return Ok(done);
        }
        let present = self.entries(target)?;
        let (write, remove): (Vec<&String>, Vec<&String>) =
            paths.iter().partition(|p| present.contains_key(*p));
        if !write.is_empty() {
            // Each object checked against its id, each file staged beside its place and renamed
            // in whole: a damaged store or a failure leaves every file as it was.
            let wanted = super::put_back::wants(&present, write.iter().copied());
            self.put_back(target, &self.root, &wanted)?;
            done.restored = write.into_iter().cloned().collect();
        }
        for path in remove {
            match self.remove(path) {
                Ok(true) => {
                    done.removed.push(path.clone());
                    self.prune_empty_parents(path, &present);
                }
                Ok(false) => {}
                Err(why) => done.skipped.push(Skipped {
                    path: path.clone(),
                    reason: why.to_string(),
                }),
            }
        }
        Ok(done)
    }

    /// Removes `rel` if it is a file or link inside the root; `Ok(false)` if it is not there.
    fn remove(&self, rel: &str) -> std::result::Result<bool, NotRemoved> {
        let mut dir = self.root.clone();
        if let Some(parent) = Path::new(rel).parent() {
            for part in parent.components() {
                dir.push(part);
                match dir.symlink_metadata() {
                    Ok(m) if m.file_type().is_symlink() => {
                        let link = dir.strip_prefix(&self.root).unwrap_or(&dir);
                        return Err(NotRemoved::Link(link.to_path_buf()));
                    }
                    Ok(m) if m.is_dir() => {}
                    _ => return Ok(false),
                }
            }
        }
        let path = self.root.join(rel);
        match path.symlink_metadata() {
            Err(_) => Ok(false),
            Ok(m) if m.is_dir() => Err(NotRemoved::Directory),
            Ok(_) => std::fs::remove_file(&path)
                .map(|()| true)
                .map_err(NotRemoved::Io),
        }
    }

    /// Removes the directories a removed file leaves empty, unless the checkpoint had them.
    fn prune_empty_parents(&self, rel: &str, present: &BTreeMap<String, String>) {
        let mut dir = Path::new(rel).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            let prefix = format!("{}/", d.display());
            let held = present
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(p, _)| p.starts_with(&prefix));
            if held || std::fs::remove_dir(self.root.join(d)).is_err() {
                return;
            }
            dir = d.parent();
        }
    }
}

/// Why a file the checkpoint did not have was left in place (a [`Skipped`]'s reason).
#[derive(Debug, thiserror::Error)]
enum NotRemoved {
    /// A folder on its way is a link now (relative to the root).
    #[error("{} is a symbolic link now; nothing is removed through one", .0.display())]
    Link(PathBuf),
    #[error("it is a directory now")]
    Directory,
    #[error(transparent)]
    Io(std::io::Error),
}

/// The rules of the session's agent, read now: what a restore may touch.
fn agent_policy(checkpoints: &Checkpoints, agent: &str) -> Result<crate::permissions::Policy> {
    crate::permissions::load_policy(&checkpoints.root, agent).map_err(|e| {
        CheckpointError::Refused(format!(
            "nothing was put back: the rules of agent `{agent}` could not be read ({e})"
        ))
    })
}

/// What `nop undo` did.
#[derive(Debug, Clone, Serialize)]
pub struct Undo {
    pub session_id: String,
    /// 1-based, among the session's runs.
    pub turn: usize,
    pub prompt: String,
    /// The later runs passed over because they changed no file.
    pub passed_over: usize,
    /// The run was undone already: this put back, as they were before it, the files its undo
    /// kept (`--turn N --force`).
    pub again: bool,
    #[serde(flatten)]
    pub files: Restored,
}

/// The session's run lock, or a refusal: nothing is put back under a running agent.
fn idle(store: &Store, id: &str) -> Result<crate::queue::RunGuard> {
    match crate::queue::RunGuard::try_acquire(&store.dir(id)) {
        Ok(Some(guard)) => Ok(guard),
        Ok(None) => Err(CheckpointError::Refused(format!(
            "session {id} is running; stop it first (`nop stop --session {id}`)"
        ))),
        Err(e) => Err(super::io(&store.dir(id))(e)),
    }
}

/// Whether a run changed no file: it ended with the files as it found them.
fn changed_nothing(turn: &TurnCheckpoint) -> bool {
    turn.after.as_deref() == Some(turn.before.as_str())
}

/// The command that puts back what the undo of run `turn` kept, in a shell and in the
/// interactive session.
fn again_command(id: &str, turn: usize) -> String {
    format!(
        "`nop undo --session {id} --turn {turn} --force` (in the interactive session: `/undo --turn {turn} --force`)"
    )
}

/// Puts back the files a run of the session changed: run `turn` (1-based), or the last run not
/// undone yet that changed files (the runs after it that changed none are passed over). A file
/// changed since by someone else is kept unless `force`. On a run undone already, `force` puts
/// back what its undo kept. The conversation is told.
pub fn undo_turn(
    store: &Store,
    checkpoints: &Checkpoints,
    id: &str,
    turn: Option<usize>,
    force: bool,
    now: DateTime<Utc>,
) -> Result<Undo> {
    let _guard = idle(store, id)?;
    let session = store.read_recent(id)?.session;
    let runs = &session.checkpoints;
    let index = match turn {
        Some(n) => n
            .checked_sub(1)
            .filter(|i| *i < runs.len())
            .ok_or_else(|| {
                CheckpointError::Refused(if runs.is_empty() {
                    no_runs(&session, id)
                } else {
                    format!(
                        "session {id} has runs 1 to {}; there is no run {n}",
                        runs.len()
                    )
                })
            })?,
        None => match runs
            .iter()
            .rposition(|t| t.undone_at.is_none() && !changed_nothing(t))
        {
            Some(i) => i,
            None => return Err(nothing_to_undo(checkpoints, &session, id)?),
        },
    };
    let chosen = &runs[index];
    let passed_over = runs[index + 1..]
        .iter()
        .filter(|t| t.undone_at.is_none() && changed_nothing(t))
        .count();
    let again = chosen.undone_at.is_some();
    let files = if again {
        undo_again(checkpoints, &session, id, index, force)?
    } else {
        undo_once(checkpoints, &session, id, index, force)?
    };
    let note = format!(
        "The user ran `nop undo`: the file changes of an earlier run (\"{}\") were reverted{}; {}.",
        chosen.prompt,
        if again { " again" } else { "" },
        files.summary()
    );
    store.update(id, now, |state| {
        if let Some(t) = state.session.checkpoints.get_mut(index) {
            t.undone_at = Some(now);
        }
        state
            .session
            .messages
            .push(Message::new(Role::System, note, now));
        Ok(())
    })?;
    tracing::info!(session = %id, op = "undo", result = "ok", turn = index + 1, again, restored = files.restored.len(), removed = files.removed.len(), kept = files.kept.len(), "run undone");
    Ok(Undo {
        session_id: id.to_string(),
        turn: index + 1,
        prompt: chosen.prompt.clone(),
        passed_over,
        again,
        files,
    })
}

/// Why a session without recorded runs has nothing to undo.
fn no_runs(session: &crate::protocol::SessionFile, id: &str) -> String {
    match &session.parent_session {
        Some(parent) => format!(
            "session {id} has no runs of its own to undo yet: it was forked from session {p} in another working tree (or before forks carried their parent's runs), and the runs before the fork are undone in {p} (`nop undo --session {p}` where {p} ran)",
            p = parent.id
        ),
        None => format!(
            "session {id} has no file checkpoints (its runs were before nop recorded them, or checkpoints.enabled is off)"
        ),
    }
}

/// The refusal when every run is undone or changed no file: how many of each, and, when the
/// latest undo kept files changed since, the command that puts them back.
fn nothing_to_undo(
    checkpoints: &Checkpoints,
    session: &crate::protocol::SessionFile,
    id: &str,
) -> Result<CheckpointError> {
    let runs = &session.checkpoints;
    if runs.is_empty() {
        return Ok(CheckpointError::Refused(no_runs(session, id)));
    }
    let undone = runs.iter().filter(|t| t.undone_at.is_some()).count();
    let unchanged = runs.len() - undone;
    let runs_word = if runs.len() == 1 { "run" } else { "runs" };
    let said = match (undone, unchanged) {
        (0, n) => format!("{n} changed no file"),
        (u, 0) => format!("{u} {} undone already", if u == 1 { "is" } else { "are" }),
        (u, n) => format!(
            "{u} {} undone already and {n} changed no file",
            if u == 1 { "is" } else { "are" }
        ),
    };
    let mut text = format!(
        "nothing to undo in session {id}: of its {} {runs_word}, {said}",
        runs.len()
    );
    // The latest undo (of a rewind, the earliest run it took back).
    let latest = runs
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.undone_at.map(|at| (at, i)))
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, i)| i);
    if let Some(index) = latest {
        let current = checkpoints.record()?;
        let kept = still_kept(checkpoints, session, index, &current)?;
        if !kept.is_empty() {
            text.push_str(&format!(
                "; the undo of run {} (\"{}\") kept {}, changed since; {} puts them back as they were before it",
                index + 1,
                runs[index].prompt,
                list(&kept.into_iter().collect::<Vec<_>>()),
                again_command(id, index + 1)
            ));
        }
    }
    Ok(CheckpointError::Refused(text))
}

/// The paths that the undone runs from `index` on changed and that are not now as they were
/// before run `index`: what their undo kept, changed since. A path a later run not undone
/// changed is its work, never counted.
fn still_kept(
    checkpoints: &Checkpoints,
    session: &crate::protocol::SessionFile,
    index: usize,
    current: &str,
) -> Result<BTreeSet<String>> {
    let (mut undone, mut live) = (BTreeSet::new(), BTreeSet::new());
    for turn in &session.checkpoints[index..] {
        let Some(after) = &turn.after else { continue };
        let changed = checkpoints.changes(&turn.before, after)?;
        if turn.undone_at.is_some() {
            undone.extend(changed);
        } else {
            live.extend(changed);
        }
    }
    let differ: BTreeSet<String> = checkpoints
        .changes(&session.checkpoints[index].before, current)?
        .into_iter()
        .collect();
    Ok(undone
        .intersection(&differ)
        .filter(|p| !live.contains(*p))
        .cloned()
        .collect())
}

/// A run undone already: with `force`, what its undo kept goes back as it was before it;
/// without, a refusal naming what is left and the command.
fn undo_again(
    checkpoints: &Checkpoints,
    session: &crate::protocol::SessionFile,
    id: &str,
    index: usize,
    force: bool,
) -> Result<Restored> {
    let current = checkpoints.record()?;
    let kept = still_kept(checkpoints, session, index, &current)?;
    let n = index + 1;
    if !force {
        return Err(CheckpointError::Refused(if kept.is_empty() {
            format!(
                "run {n} of session {id} is undone already: the files it changed are as they were before it"
            )
        } else {
            format!(
                "run {n} of session {id} is undone already; its undo kept {}, changed since; {} puts them back as they were before it",
                list(&kept.into_iter().collect::<Vec<_>>()),
                again_command(id, n)
            )
        }));
    }
    let policy = agent_policy(checkpoints, &session.agent)?;
    checkpoints.restore(&session.checkpoints[index].before, &kept, &policy)
}

/// Run `index`, not undone yet: the paths it changed go back as they were before it, except
/// those changed since its end (unless `force`). A run whose end was not recorded is undone
/// only with `force`.
fn undo_once(
    checkpoints: &Checkpoints,
    session: &crate::protocol::SessionFile,
    id: &str,
    index: usize,
    force: bool,
) -> Result<Restored> {
    let turn = &session.checkpoints[index];
    let current = checkpoints.record()?;
    let (changed, kept) = match &turn.after {
        Some(after) => {
            let changed: BTreeSet<String> = checkpoints
                .changes(&turn.before, after)?
                .into_iter()
                .collect();
            let since: BTreeSet<String> =
                checkpoints.changes(after, &current)?.into_iter().collect();
            let kept: BTreeSet<String> = changed.intersection(&since).cloned().collect();
            (changed, kept)
        }
        None => {
            let changed: BTreeSet<String> = checkpoints
                .changes(&turn.before, &current)?
                .into_iter()
                .collect();
            if !force && !changed.is_empty() {
                return Err(CheckpointError::Refused(format!(
                    "run {n} of session {id} did not end normally, or its end was not recorded (its process was killed, or the checkpoint at its end failed and warned why), so nop cannot tell its changes from yours; changed since it began: {}. `nop undo --session {id} --turn {n} --force` puts all of them back as they were before it",
                    list(&changed.into_iter().collect::<Vec<_>>()),
                    n = index + 1,
                )));
            }
            (changed, BTreeSet::new())
        }
    };
    let todo: BTreeSet<String> = if force {
        changed
    } else {
        changed.difference(&kept).cloned().collect()
    };
    let policy = agent_policy(checkpoints, &session.agent)?;
    let mut files = checkpoints.restore(&turn.before, &todo, &policy)?;
    if !force {
        files.kept = kept.into_iter().collect();
    }
    Ok(files)
}

/// What `nop rewind` puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindMode {
    Files,
    Conversation,
    Both,
}

impl RewindMode {
    fn files(self) -> bool {
        self != RewindMode::Conversation
    }

    fn conversation(self) -> bool {
        self != RewindMode::Files
    }
}

/// What `nop rewind` did.
#[derive(Debug, Clone, Serialize)]
pub struct Rewind {
    pub session_id: String,
    pub snapshot_id: String,
    /// The session as it was before the rewind (so a rewind can itself be rewound).
    pub saved_as: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Restored>,
    /// Messages before and after, when the conversation was rewound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<(usize, usize)>,
}

/// Takes session `id` back to snapshot `snapshot`: its files (what nop's runs changed since; a
/// path someone else changed is kept unless `force`), its conversation and plan, or both. The
/// session as it was is snapshotted first.
pub fn rewind(
    store: &Store,
    checkpoints: Option<&Checkpoints>,
    id: &str,
    snapshot: &str,
    mode: RewindMode,
    force: bool,
    now: DateTime<Utc>,
) -> Result<Rewind> {
    let _guard = idle(store, id)?;
    let snap = store.read_snapshot(id, snapshot)?;
    let target = match (mode.files(), &snap.checkpoint, checkpoints) {
        (false, _, _) => None,
        (true, Some(tree), Some(c)) => Some((tree.clone(), c)),
        (true, None, _) => {
            return Err(CheckpointError::Refused(format!(
                "snapshot {} has no file checkpoint (taken before nop recorded them, or with checkpoints off); `--conversation` rewinds the conversation alone",
                snap.snapshot_id
            )));
        }
        (true, Some(_), None) => {
            return Err(CheckpointError::Refused(
                "file checkpoints are off (checkpoints.enabled); `--conversation` rewinds the conversation alone".to_string(),
            ));
        }
    };
    let saved_as = store.snapshot(id, now)?;
    let session = store.read_recent(id)?.session;
    let since: Vec<usize> = session
        .checkpoints
        .iter()
        .enumerate()
        .filter(|(_, t)| t.started_at >= snap.created_at)
        .map(|(i, _)| i)
        .collect();
    let files = match target {
        Some((tree, checkpoints)) => {
            let current = current_tree(store, checkpoints, id, &saved_as)?;
            Some(files_back(
                checkpoints,
                &session,
                &since,
                snap.created_at,
                &tree,
                &current,
                force,
            )?)
        }
        None => None,
    };
    let note = files.as_ref().filter(|_| !mode.conversation()).map(|f| {
        format!(
            "The user ran `nop rewind --files`: the files were taken back to snapshot {}; {}.",
            snap.snapshot_id,
            f.summary()
        )
    });
    let messages = record_rewind(store, id, now, mode, &since, note, |state| {
        state.session.messages = snap.session.messages.clone();
        state.session.compressions = snap.session.compressions.clone();
        state.plan = snap.plan.clone();
    })?;
    tracing::info!(session = %id, op = "rewind", result = "ok", snapshot = %snap.snapshot_id, saved_as = %saved_as, "rewound");
    Ok(Rewind {
        session_id: id.to_string(),
        snapshot_id: snap.snapshot_id,
        saved_as,
        files,
        messages,
    })
}

/// The files as they are now: the checkpoint the rewind's own snapshot `saved_as` took, or a
/// new one.
fn current_tree(
    store: &Store,
    checkpoints: &Checkpoints,
    id: &str,
    saved_as: &str,
) -> Result<String> {
    match store.read_snapshot(id, saved_as)?.checkpoint {
        Some(current) => Ok(current),
        None => checkpoints.record(),
    }
}

/// Records a rewind in the session: the runs `since` marked undone when files went back, the
/// `note` (files only), and, when the conversation goes back too, `conversation` applied and the
/// session idle. Returns the message counts before and after, for a conversation rewind.
fn record_rewind(
    store: &Store,
    id: &str,
    now: DateTime<Utc>,
    mode: RewindMode,
    since: &[usize],
    note: Option<String>,
    conversation: impl FnOnce(&mut crate::session::SessionState),
) -> Result<Option<(usize, usize)>> {
    let mark_undone = |checkpoints: &mut Vec<crate::protocol::TurnCheckpoint>| {
        if mode.files() {
            for i in since {
                if let Some(t) = checkpoints.get_mut(*i) {
                    t.undone_at.get_or_insert(now);
                }
            }
        }
    };
    let note = note.map(|note| Message::new(Role::System, note, now));
    if !mode.conversation() {
        // The files alone: a note added, nothing of the conversation read.
        store.update(id, now, |state| {
            mark_undone(&mut state.session.checkpoints);
            state.session.messages.extend(note);
            Ok(())
        })?;
        return Ok(None);
    }
    Ok(store.update_whole(id, now, |state| {
        let before = state.session.messages.len();
        mark_undone(&mut state.session.checkpoints);
        state.session.messages.extend(note);
        conversation(state);
        state.session.status = SessionStatus::Idle;
        Ok(Some((before, state.session.messages.len())))
    })?)
}

/// Puts back to `tree` the files nop's runs changed since `from` (the turns `since`, and the
/// undo, after `from`, of a turn from before it: rewinding forward over it is a redo); a path
/// someone else changed since nop last touched the files is kept unless `force`. `current`: the
/// files now.
fn files_back(
    checkpoints: &Checkpoints,
    session: &crate::protocol::SessionFile,
    since: &[usize],
    from: DateTime<Utc>,
    tree: &str,
    current: &str,
    force: bool,
) -> Result<Restored> {
    let all: BTreeSet<String> = checkpoints.changes(tree, current)?.into_iter().collect();
    // What nop itself did since `from`: its runs, and the undo, after `from`, of a run from
    // before it. The last of them left the files as `latest` says; a path that differs from
    // it was changed by someone else.
    let mut ours = BTreeSet::new();
    let mut latest: Option<(DateTime<Utc>, String)> = None;
    let mut last = |at: DateTime<Utc>, tree: &String| {
        if latest.as_ref().is_none_or(|(t, _)| at >= *t) {
            latest = Some((at, tree.clone()));
        }
    };
    for (i, turn) in session.checkpoints.iter().enumerate() {
        let Some(after) = &turn.after else { continue };
        if since.contains(&i) {
            ours.extend(checkpoints.changes(&turn.before, after)?);
            last(turn.ended_at.unwrap_or(turn.started_at), after);
        }
        if let Some(undone) = turn.undone_at.filter(|u| *u >= from && !since.contains(&i)) {
            ours.extend(checkpoints.changes(&turn.before, after)?);
            last(undone, &turn.before);
        }
    }
    let changed_since: BTreeSet<String> = match &latest {
        Some((_, tree)) => checkpoints.changes(tree, current)?.into_iter().collect(),
        None => all.clone(),
    };
    let (todo, kept): (BTreeSet<String>, BTreeSet<String>) = all
        .into_iter()
        .partition(|p| force || (ours.contains(p) && !changed_since.contains(p)));
    let policy = agent_policy(checkpoints, &session.agent)?;
    let mut files = checkpoints.restore(tree, &todo, &policy)?;
    files.kept = kept.into_iter().collect();
    Ok(files)
}

/// What a rewind to a turn did (`nop rewind --turn N`, `/rewind`'s picker).
#[derive(Debug, Clone, Serialize)]
pub struct TurnRewind {
    pub session_id: String,
    /// 1-based, among the session's runs.
    pub turn: usize,
    pub prompt: String,
    /// The session as it was before the rewind (so a rewind can itself be rewound).
    pub saved_as: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Restored>,
    /// Messages before and after, when the conversation was rewound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<(usize, usize)>,
}

/// Takes session `id` back to the start of its run `turn` (1-based): the files as they were
/// before it (what nop's runs changed since; a path someone else changed is kept unless
/// `force`), the conversation as it was when it began, or both. The session as it was is
/// snapshotted first, so `nop rewind --to` that snapshot undoes this.
pub fn rewind_turn(
    store: &Store,
    checkpoints: Option<&Checkpoints>,
    id: &str,
    turn: usize,
    mode: RewindMode,
    force: bool,
    now: DateTime<Utc>,
) -> Result<TurnRewind> {
    let _guard = idle(store, id)?;
    let session = store.read_recent(id)?.session;
    let count = session.checkpoints.len();
    let Some(index) = turn.checked_sub(1).filter(|i| *i < count) else {
        return Err(CheckpointError::Refused(if count == 0 {
            format!(
                "session {id} has no recorded runs (they were before nop recorded them, or checkpoints.enabled is off)"
            )
        } else {
            format!("session {id} has runs 1 to {count}; there is no run {turn}")
        }));
    };
    let chosen = session.checkpoints[index].clone();
    let checkpoints = match (mode.files(), checkpoints) {
        (true, None) => {
            return Err(CheckpointError::Refused(
                "file checkpoints are off (checkpoints.enabled); `--conversation` rewinds the conversation alone".to_string(),
            ));
        }
        (true, Some(c)) => Some(c),
        (false, _) => None,
    };
    // A compaction since the run began rewrote the messages it counted.
    if mode.conversation()
        && session
            .compressions
            .iter()
            .any(|c| c.timestamp >= chosen.started_at)
    {
        return Err(CheckpointError::Refused(format!(
            "the conversation of session {id} was compacted after run {turn} began, so it cannot be cut back to that run; `--files` takes the files back alone, or rewind to the snapshot the compaction saved (`nop sessions show {id}`)"
        )));
    }
    let saved_as = store.snapshot(id, now)?;
    let since: Vec<usize> = (index..count).collect();
    let files = match checkpoints {
        Some(checkpoints) => {
            let current = current_tree(store, checkpoints, id, &saved_as)?;
            Some(files_back(
                checkpoints,
                &session,
                &since,
                chosen.started_at,
                &chosen.before,
                &current,
                force,
            )?)
        }
        None => None,
    };
    let note = files.as_ref().filter(|_| !mode.conversation()).map(|f| {
        format!(
            "The user rewound the files to before run {turn} (\"{}\"); {}.",
            chosen.prompt,
            f.summary()
        )
    });
    let messages = record_rewind(store, id, now, mode, &since, note, |state| {
        state.session.messages.truncate(chosen.messages_before);
    })?;
    tracing::info!(session = %id, op = "rewind", result = "ok", turn, saved_as = %saved_as, "rewound to a turn");
    Ok(TurnRewind {
        session_id: id.to_string(),
        turn,
        prompt: chosen.prompt,
        saved_as,
        files,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{CompressionRecord, TurnCheckpoint};

    fn turn(messages_before: usize, started_at: DateTime<Utc>) -> TurnCheckpoint {
        TurnCheckpoint {
            before: "t0".into(),
            after: Some("t1".into()),
            started_at,
            ended_at: Some(started_at),
            messages_before,
            prompt: "second".into(),
            undone_at: None,
        }
    }

    #[test]
    fn a_file_the_checkpoint_lacks_is_removed_never_through_a_link_nor_a_directory() {
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("d")).expect("dir");
        std::fs::write(root.join("f"), "x").expect("file");
        std::os::unix::fs::symlink(dir.path(), root.join("link")).expect("link");
        let cp = Checkpoints::new(&root, &dir.path().join(".nop"), 1.0);
        let why = |rel: &str| cp.remove(rel).expect_err(rel).to_string();
        assert_eq!(why("d"), "it is a directory now");
        assert_eq!(
            why("link/repo/f"),
            "link is a symbolic link now; nothing is removed through one"
        );
        assert!(!cp.remove("missing").expect("missing"));
        assert!(cp.remove("f").expect("removed"));
        assert!(!root.join("f").exists());
    }

    #[test]
    fn a_turn_rewind_cuts_the_conversation_back_and_refuses_a_missing_run_or_a_compaction_since() {
        let _serial = crate::checkpoint::serial();
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::new(
            dir.path().join("sessions"),
            std::time::Duration::from_secs(5),
        );
        let now = Utc::now();
        let id = store.create("coder", now).expect("create").session_id;
        store
            .update(&id, now, |state| {
                for text in ["first", "first done", "second", "second done"] {
                    let role = if text.ends_with("done") {
                        Role::Assistant
                    } else {
                        Role::User
                    };
                    state.session.messages.push(Message::new(role, text, now));
                }
                state.session.checkpoints.push(turn(2, now));
                Ok(())
            })
            .expect("update");
        let conversation = RewindMode::Conversation;
        let missing = rewind_turn(&store, None, &id, 2, conversation, false, now);
        assert!(
            missing.is_err_and(|e| e.to_string().contains("runs 1 to 1")),
            "run 2 does not exist"
        );
        let files = rewind_turn(&store, None, &id, 1, RewindMode::Both, false, now);
        assert!(files.is_err_and(|e| e.to_string().contains("checkpoints are off")));

        let later = now + chrono::Duration::seconds(1);
        let done = rewind_turn(&store, None, &id, 1, conversation, false, later).expect("rewind");
        assert_eq!(done.messages, Some((4, 2)));
        let session = store.read_session(&id).expect("read");
        let texts: Vec<&str> = session
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(texts, ["first", "first done"]);
        assert!(store.read_snapshot(&id, &done.saved_as).is_ok());

        store
            .update(&id, later, |state| {
                state.session.compressions.push(CompressionRecord {
                    snapshot_id: done.saved_as.clone(),
                    timestamp: later,
                    messages_before: None,
                    messages_after: None,
                    reason: None,
                    extra: Default::default(),
                });
                Ok(())
            })
            .expect("update");
        let compacted = rewind_turn(&store, None, &id, 1, conversation, false, later);
        assert!(compacted.is_err_and(|e| e.to_string().contains("compacted")));
    }
}
