//! Priority-based sessions (seed 000, seed 003): one active session per user and repository,
//! among agents that declare a priority. A higher-priority newcomer pauses an interruptible
//! active session, which resumes by itself when the newcomer ends; otherwise the newcomer is
//! refused with the reason.
//!
//! The stack lives in `.nop/state/active.json`, changed only under an exclusive lock on
//! `.nop/state/active.lock`, so `nop` processes in several terminals agree. A process that died
//! without cleaning up is noticed by its pid, and a session waiting for input stops counting as
//! active after the idle timeout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::session::{SessionError, write_atomic};

/// Events kept in the state file for `nop sessions stack`.
const EVENTS_KEPT: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    Running,
    Paused,
    WaitingInput,
}

/// One active or paused session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub session_id: String,
    pub agent: String,
    pub priority: u8,
    pub interruptible: bool,
    /// The process running it (none while it waits for input).
    pub pid: Option<u32>,
    pub state: EntryState,
    pub since: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackEvent {
    pub at: DateTime<Utc>,
    pub user: String,
    /// started, paused, resumed, refused, ended.
    pub kind: String,
    pub session_id: Option<String>,
    pub agent: String,
    pub detail: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    #[serde(default)]
    users: BTreeMap<String, Vec<Entry>>,
    #[serde(default)]
    events: Vec<StackEvent>,
}

/// The answer to a newcomer.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// It may run; `paused` is the session it paused, if any.
    Admitted { paused: Option<Entry> },
    /// It may not: `reason` names the active agent and why.
    Refused { reason: String },
}

/// The stack of one user in one repository.
#[derive(Debug, Clone)]
pub struct Coordinator {
    dir: PathBuf,
    user: String,
    idle_timeout: Duration,
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

impl Coordinator {
    pub fn new(nop_dir: &Path, user: &str, idle_timeout: Duration) -> Coordinator {
        Coordinator {
            dir: nop_dir.join("state"),
            user: user.to_string(),
            idle_timeout,
        }
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    fn with_state<T>(&self, change: impl FnOnce(&mut State, &str) -> T) -> Result<T, SessionError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SessionError::Io { path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        // Held until the end of this function.
        let _lock = crate::session::lock_file(
            &self.dir.join("active.lock"),
            crate::session::LockKind::Exclusive,
            Duration::from_secs(10),
            "active-session stack",
        )?;
        let path = self.dir.join("active.json");
        let mut state = self.read(&path)?;
        let value = change(&mut state, &self.user);
        let excess = state.events.len().saturating_sub(EVENTS_KEPT);
        state.events.drain(..excess);
        let bytes = crate::session::to_json(&state, "the priority stack")?;
        write_atomic(&path, &bytes)?;
        Ok(value)
    }

    /// The stack as it stands, with dead entries dropped (in memory: only changes write the file).
    /// The file is replaced atomically, so reading it needs no lock.
    fn read(&self, path: &Path) -> Result<State, SessionError> {
        let mut state: State = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| SessionError::Corrupt {
                path: path.to_path_buf(),
                pos: None,
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => {
                return Err(SessionError::Io {
                    path: path.to_path_buf(),
                    source: e,
                });
            }
        };
        self.clean(&mut state);
        Ok(state)
    }

    /// Drops entries whose process died and waiting sessions past the idle timeout; the session
    /// below a dropped running one resumes.
    fn clean(&self, state: &mut State) {
        let now = Utc::now();
        let idle = chrono::Duration::from_std(self.idle_timeout).unwrap_or(chrono::Duration::MAX);
        for (user, stack) in state.users.iter_mut() {
            let before = stack.len();
            stack.retain(|e| match e.state {
                EntryState::WaitingInput => now - e.updated_at < idle,
                EntryState::Running | EntryState::Paused => e.pid.is_some_and(alive),
            });
            if stack.len() != before {
                resume_top(stack, &mut state.events, user, "the session above it ended");
            }
        }
        state.users.retain(|_, stack| !stack.is_empty());
    }

    /// Seed 000 §4: may `agent` (with its effective priority) start a session now?
    pub fn admit(
        &self,
        session_id: &str,
        agent: &str,
        priority: u8,
        interruptible: bool,
    ) -> Result<Admission, SessionError> {
        self.with_state(|state, user| {
            let stack = state.users.entry(user.to_string()).or_default();
            let now = Utc::now();
            if let Some(existing) = stack.iter_mut().find(|e| e.session_id == session_id) {
                // Continuing a session that is already on the stack (it was waiting for input).
                existing.pid = Some(std::process::id());
                existing.state = EntryState::Running;
                existing.updated_at = now;
                return Admission::Admitted { paused: None };
            }
            let active = stack
                .iter()
                .rev()
                .find(|e| e.state != EntryState::Paused)
                .cloned();
            let newcomer = Entry {
                session_id: session_id.to_string(),
                agent: agent.to_string(),
                priority,
                interruptible,
                pid: Some(std::process::id()),
                state: EntryState::Running,
                since: now,
                updated_at: now,
            };
            let event =
                |kind: &str, session: Option<&str>, agent: &str, detail: String| StackEvent {
                    at: now,
                    user: user.to_string(),
                    kind: kind.into(),
                    session_id: session.map(str::to_string),
                    agent: agent.to_string(),
                    detail,
                };
            let Some(current) = active else {
                stack.push(newcomer);
                state.events.push(event(
                    "started",
                    Some(session_id),
                    agent,
                    format!("priority {priority}"),
                ));
                return Admission::Admitted { paused: None };
            };
            if priority > current.priority && current.interruptible {
                for e in stack
                    .iter_mut()
                    .filter(|e| e.session_id == current.session_id)
                {
                    e.state = EntryState::Paused;
                    e.updated_at = now;
                }
                stack.push(newcomer);
                state.events.push(event(
                    "paused",
                    Some(&current.session_id),
                    &current.agent,
                    format!("for {agent} (priority {priority} > {})", current.priority),
                ));
                state.events.push(event(
                    "started",
                    Some(session_id),
                    agent,
                    format!("priority {priority}"),
                ));
                return Admission::Admitted {
                    paused: Some(current),
                };
            }
            let reason = if priority > current.priority {
                format!(
                    "{} is in progress (priority {}) and cannot be interrupted",
                    current.agent, current.priority
                )
            } else {
                format!(
                    "{} is in progress with priority {} ≥ {agent}'s {priority}",
                    current.agent, current.priority
                )
            };
            state
                .events
                .push(event("refused", None, agent, reason.clone()));
            Admission::Refused { reason }
        })
    }

    /// The state of `session_id` on the stack (`None`: not on it).
    pub fn state_of(&self, session_id: &str) -> Result<Option<EntryState>, SessionError> {
        // Asked at every checkpoint: a read, never a write.
        let state = self.read(&self.dir.join("active.json"))?;
        Ok(state
            .users
            .get(&self.user)
            .and_then(|s| s.iter().find(|e| e.session_id == session_id))
            .map(|e| e.state))
    }

    /// [`Coordinator::state_of`] off the async threads (it takes the stack's lock and reads a
    /// file): what a run asks at every checkpoint.
    pub async fn state_of_async(
        &self,
        session_id: &str,
    ) -> Result<Option<EntryState>, SessionError> {
        let (coordinator, id) = (self.clone(), session_id.to_string());
        crate::session::off_thread(move || coordinator.state_of(&id))
            .await
            .unwrap_or_else(|| {
                Err(SessionError::Io {
                    path: self.dir.clone(),
                    source: std::io::Error::other("reading the priority stack was cancelled"),
                })
            })
    }

    /// The session waits for input: it stays active (without a process) until the idle timeout.
    pub fn set_waiting(&self, session_id: &str) -> Result<(), SessionError> {
        self.with_state(|state, user| {
            if let Some(e) = state
                .users
                .get_mut(user)
                .and_then(|s| s.iter_mut().find(|e| e.session_id == session_id))
            {
                e.state = EntryState::WaitingInput;
                e.pid = None;
                e.updated_at = Utc::now();
            }
        })
    }

    /// The session ended: it leaves the stack, and the session it paused (if it is now on top)
    /// resumes.
    pub fn finish(&self, session_id: &str) -> Result<(), SessionError> {
        self.with_state(|state, user| {
            if let Some(stack) = state.users.get_mut(user) {
                take_off(stack, &mut state.events, user, session_id, "ended", "");
            }
        })
    }

    /// A deleted session leaves every user's stack (one waiting for input would otherwise count
    /// as active until the idle timeout), and the session it paused resumes. `true` if it was in
    /// a stack; the file is only rewritten then.
    pub fn forget(&self, session_id: &str) -> Result<bool, SessionError> {
        let listed = |state: &State| {
            state
                .users
                .values()
                .any(|stack| stack.iter().any(|e| e.session_id == session_id))
        };
        if !listed(&self.read(&self.dir.join("active.json"))?) {
            return Ok(false);
        }
        self.with_state(|state, _| {
            let State { users, events } = state;
            for (user, stack) in users.iter_mut() {
                let detail = "the session was deleted";
                take_off(stack, events, user, session_id, "was deleted", detail);
            }
            users.retain(|_, stack| !stack.is_empty());
            true
        })
    }

    /// The user's stack (bottom first) and recent events (oldest first).
    pub fn stack(&self) -> Result<(Vec<Entry>, Vec<StackEvent>), SessionError> {
        self.with_state(|state, user| {
            let entries = state.users.get(user).cloned().unwrap_or_default();
            let events = state
                .events
                .iter()
                .filter(|e| e.user == user)
                .cloned()
                .collect();
            (entries, events)
        })
    }
}

/// Takes `session_id` off `user`'s `stack`, if it is on it, with an `ended` event saying
/// `detail`; the session it paused, if now on top, resumes because "<its agent> <how>".
fn take_off(
    stack: &mut Vec<Entry>,
    events: &mut Vec<StackEvent>,
    user: &str,
    session_id: &str,
    how: &str,
    detail: &str,
) {
    let Some(i) = stack.iter().position(|e| e.session_id == session_id) else {
        return;
    };
    let gone = stack.remove(i);
    events.push(StackEvent {
        at: Utc::now(),
        user: user.to_string(),
        kind: "ended".into(),
        session_id: Some(gone.session_id),
        agent: gone.agent.clone(),
        detail: detail.to_string(),
    });
    resume_top(stack, events, user, &format!("{} {how}", gone.agent));
}

/// If the top of the stack is paused, it runs again.
fn resume_top(stack: &mut [Entry], events: &mut Vec<StackEvent>, user: &str, why: &str) {
    if let Some(top) = stack.last_mut()
        && top.state == EntryState::Paused
    {
        top.state = EntryState::Running;
        top.updated_at = Utc::now();
        events.push(StackEvent {
            at: Utc::now(),
            user: user.to_string(),
            kind: "resumed".into(),
            session_id: Some(top.session_id.clone()),
            agent: top.agent.clone(),
            detail: why.to_string(),
        });
    }
}

/// Wakes a paused session as soon as the priority stack changes (inotify on `.nop/state/`),
/// instead of polling it often. Another process rewrites the stack by rename, so the directory
/// is watched.
pub struct StackWatch {
    inotify: std::sync::Arc<nix::sys::inotify::Inotify>,
}

impl StackWatch {
    /// Resolves when the stack changes, or after at most `limit` (a process killed with -9
    /// changes nothing on disk; its entry is dropped when the stack is next read).
    pub async fn changed(&self, limit: Duration) {
        let inotify = std::sync::Arc::clone(&self.inotify);
        let wait = tokio::task::spawn_blocking(move || {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            use std::os::fd::AsFd as _;
            let timeout = PollTimeout::try_from(limit).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, timeout).is_ok_and(|n| n > 0) {
                // Drained so the next wait blocks until the next change.
                let _ = inotify.read_events();
            }
        });
        let _ = wait.await;
    }
}

impl Coordinator {
    /// A watch on the stack; `None` where inotify is unavailable (the caller polls).
    pub fn watch(&self) -> Option<StackWatch> {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        inotify
            .add_watch(
                &self.dir,
                // The stack is replaced by rename; closing the lock file is not news.
                AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE,
            )
            .ok()?;
        Some(StackWatch {
            inotify: std::sync::Arc::new(inotify),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn a_watch_wakes_when_the_stack_changes_and_not_for_nothing() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let c = Coordinator::new(dir.path(), "u", Duration::from_secs(60));
        c.admit("music", "music_agent", 20, true)?;
        let watch = c
            .watch()
            .ok_or_else(|| anyhow::anyhow!("no inotify here"))?;
        // Nothing changes: the wait runs to its limit.
        let started = std::time::Instant::now();
        watch.changed(Duration::from_millis(300)).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        // Another writer changes the stack: the wait ends long before its limit.
        let writer = c.clone();
        let change = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            writer.finish("music")
        });
        let started = std::time::Instant::now();
        watch.changed(Duration::from_secs(30)).await;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the watch missed the change"
        );
        change
            .join()
            .map_err(|_| anyhow::anyhow!("writer panicked"))??;
        Ok(())
    }

    #[test]
    fn seed_000_rules() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let c = Coordinator::new(dir.path(), "u", Duration::from_secs(60));
        assert_eq!(
            c.admit("music", "music_agent", 20, true)?,
            Admission::Admitted { paused: None }
        );
        let Admission::Admitted { paused: Some(p) } = c.admit("phone", "phone_agent", 90, false)?
        else {
            anyhow::bail!("phone should pause music");
        };
        assert_eq!(p.session_id, "music");
        assert_eq!(c.state_of("music")?, Some(EntryState::Paused));
        assert!(
            matches!(c.admit("chat", "chat_agent", 10, true)?, Admission::Refused { reason } if reason.contains("phone_agent"))
        );
        c.finish("phone")?;
        assert_eq!(c.state_of("music")?, Some(EntryState::Running));
        let (stack, events) = c.stack()?;
        assert_eq!(stack.len(), 1);
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            vec![
                "started", "paused", "started", "refused", "ended", "resumed"
            ]
        );
        Ok(())
    }

    #[test]
    fn a_deleted_session_leaves_the_stack_and_what_it_paused_resumes() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let c = Coordinator::new(dir.path(), "u", Duration::from_secs(3600));
        c.admit("music", "music_agent", 20, true)?;
        c.admit("phone", "phone_agent", 90, false)?;
        // Waiting for input, it would stay active for the idle timeout.
        c.set_waiting("phone")?;
        assert!(!c.forget("unknown")?);
        assert!(c.forget("phone")?);
        assert_eq!(c.state_of("phone")?, None);
        assert_eq!(c.state_of("music")?, Some(EntryState::Running));
        let (_, events) = c.stack()?;
        assert!(
            events
                .iter()
                .any(|e| e.kind == "ended" && e.detail == "the session was deleted")
        );
        Ok(())
    }

    #[test]
    fn an_ended_or_deleted_session_says_so_and_resumes_what_it_paused() -> anyhow::Result<()> {
        type Leave = fn(&Coordinator) -> Result<(), SessionError>;
        let finish: Leave = |c| c.finish("phone");
        let forget: Leave = |c| c.forget("phone").map(|_| ());
        for (leave, how, detail) in [
            (finish, "ended", ""),
            (forget, "was deleted", "the session was deleted"),
        ] {
            let dir = tempfile::tempdir()?;
            let c = Coordinator::new(dir.path(), "u", Duration::from_secs(3600));
            c.admit("music", "music_agent", 20, true)?;
            c.admit("phone", "phone_agent", 90, false)?;
            leave(&c)?;
            let (_, events) = c.stack()?;
            let last: Vec<_> = events
                .iter()
                .rev()
                .take(2)
                .rev()
                .map(|e| {
                    (
                        e.kind.as_str(),
                        e.session_id.as_deref(),
                        e.agent.as_str(),
                        e.detail.clone(),
                    )
                })
                .collect();
            assert_eq!(
                last,
                vec![
                    ("ended", Some("phone"), "phone_agent", detail.to_string()),
                    (
                        "resumed",
                        Some("music"),
                        "music_agent",
                        format!("phone_agent {how}")
                    ),
                ]
            );
        }
        Ok(())
    }
}
