//! Several writers on one session at once: every append lands exactly once.

use std::collections::BTreeSet;
use std::thread;

use chrono::Utc;
use nop::protocol::{Message, Role};

use crate::support::Repo;

const PROCESSES: usize = 6;
const APPENDS_EACH: usize = 8;

#[test]
fn processes_appending_to_one_session_lose_nothing_and_duplicate_nothing() {
    let repo = Repo::new();
    let id = repo.new_session();
    thread::scope(|scope| {
        for p in 0..PROCESSES {
            let repo = &repo;
            let id = &id;
            scope.spawn(move || {
                for i in 0..APPENDS_EACH {
                    repo.run(&["sessions", "append", id, &format!("p{p}-m{i}")]);
                }
            });
        }
    });
    let session = repo.store().read_session(&id).expect("read");
    let contents: Vec<&str> = session
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(contents.len(), PROCESSES * APPENDS_EACH, "{contents:?}");
    let unique: BTreeSet<&str> = contents.iter().copied().collect();
    assert_eq!(unique.len(), contents.len(), "duplicates in {contents:?}");
    // Each writer's own messages keep their order.
    for p in 0..PROCESSES {
        let mine: Vec<&str> = contents
            .iter()
            .copied()
            .filter(|c| c.starts_with(&format!("p{p}-")))
            .collect();
        let expected: Vec<String> = (0..APPENDS_EACH).map(|i| format!("p{p}-m{i}")).collect();
        assert_eq!(mine, expected);
    }
}

#[test]
fn threads_of_one_process_share_the_lock_too() {
    let repo = Repo::new();
    let id = repo.new_session();
    let store = repo.store();
    thread::scope(|scope| {
        for t in 0..8 {
            let store = &store;
            let id = &id;
            scope.spawn(move || {
                for i in 0..25 {
                    let now = Utc::now();
                    store
                        .append(
                            id,
                            vec![Message::new(Role::User, format!("t{t}-{i}"), now)],
                            now,
                        )
                        .expect("append");
                }
            });
        }
    });
    let session = store.read_session(&id).expect("read");
    let unique: BTreeSet<&str> = session
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(session.messages.len(), 200);
    assert_eq!(unique.len(), 200);
}
