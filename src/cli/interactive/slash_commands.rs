//! The interactive session's slash commands: `/help`, `/model`, `/mode`, `/clear`, `/resume`,
//! `/fork`, `/diff`, `/undo` (a picker of the prompts that changed files, also Esc Esc),
//! `/rewind` (a picker of runs), `/plan`, `/snapshot`, `/goal`, `/status`, `/verbose`,
//! `/compact` and the custom commands.

/// `eprintln!`, broken between words at the terminal's width.
macro_rules! say {
    () => { eprintln!() };
    ($($arg:tt)*) => { crate::cli::term::style::say(&format!($($arg)*)) };
}

use nop::agent::Op;

use super::{Command, Interactive, pick_session};
use crate::cli::{picker, render, slash, term};

impl Interactive {
    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    pub(super) fn command(&mut self, rt: &tokio::runtime::Runtime, input: &str) -> Command {
        let (name, argument) = match input.split_once(char::is_whitespace) {
            Some((name, rest)) => (name, rest.trim()),
            None => (input, ""),
        };
        let store = self.runtime.store().clone();
        match name {
            "/exit" | "/quit" => return Command::Leave,
            "/help" => {
                say!("{}", slash::help());
                let custom = self.custom_commands().menu();
                if !custom.is_empty() {
                    say!("\ncustom commands (nop commands list shows their files):");
                    for (name, help) in custom {
                        say!("{name:<10} {help}");
                    }
                }
            }
            "/compact" => return Command::Run(Op::Compact),
            "/goal" => return self.goal(argument),
            "/verbose" => {
                let on = self.renderer.toggle_verbose();
                say!(
                    "{}",
                    if on {
                        "whole tool results and diffs from now on"
                    } else {
                        "tool results cut to their last lines from now on"
                    }
                );
            }
            "/status" | "/cost" => {
                let file = self
                    .session
                    .as_ref()
                    .and_then(|id| store.read_session(id).ok());
                let model = self.model();
                for line in slash::status(&model, file.as_ref(), self.renderer.context()) {
                    say!("{line}");
                }
                let advisors = self.renderer.advisors();
                if !advisors.is_empty() {
                    say!("advisors {}", advisors.join(" · "));
                }
            }
            "/mode" | "/approvals" if argument.is_empty() => {
                let mode = self.runtime.approver().mode();
                say!("approval: {} · {}", mode.as_str(), mode.describe());
            }
            "/mode" | "/approvals" => match nop::config::ApprovalSetting::parse(argument) {
                Some(setting) => {
                    let mode: nop::permissions::ApprovalMode = setting.into();
                    self.runtime.approver().set_mode(mode);
                    say!("approval: {} · {}", mode.as_str(), mode.describe());
                }
                None => {
                    say!("unknown approval mode `{argument}`: never, on-request, always or plan")
                }
            },
            "/model" if argument.is_empty() => say!("model {}", self.model()),
            "/model" => {
                self.runtime = self.runtime.clone().with_model(argument);
                let session = self.session.clone();
                self.reopen(rt, session);
                say!("model {argument} from the next prompt on");
            }
            "/clear" => {
                self.reopen(rt, None);
                say!("new session: it starts with your next prompt");
            }
            "/resume" => match pick_session(&store) {
                Ok(Some(id)) => self.switch(rt, Some(id)),
                Ok(None) => {}
                Err(e) => say!("error: {e}"),
            },
            "/fork" => {
                let Some(id) = self.session.clone() else {
                    say!("no session yet: say something first");
                    return Command::Done;
                };
                match store.fork(&id, None, chrono::Utc::now()) {
                    Ok(fork) => {
                        say!("forked {id} → {}; you are in the fork", fork.session_id);
                        self.reopen(rt, Some(fork.session_id));
                    }
                    Err(e) => say!("error: {e}"),
                }
            }
            "/diff" => {
                let Some(id) = &self.session else {
                    say!("no session yet: say something first");
                    return Command::Done;
                };
                match store.read_session(id) {
                    Ok(file) => {
                        let root = self.runtime.workspace().root.clone();
                        let style = term::style::Style::detect(true);
                        for line in slash::session_diff(&root, &file.messages, style) {
                            say!("{line}");
                        }
                    }
                    Err(e) => say!("error: {e}"),
                }
            }
            "/undo" | "/rewind" => {
                let Some(id) = self.session.clone() else {
                    say!("no session yet: say something first");
                    return Command::Done;
                };
                let ws = self.runtime.workspace().clone();
                let checkpoints = ws.checkpoints(self.runtime.config());
                if name == "/undo" {
                    return self.undo(rt, &store, &id, argument, checkpoints.as_ref());
                }
                if argument.is_empty() {
                    return self.rewind_to_a_turn(rt, &store, &id, checkpoints.as_ref());
                }
                let (to, mode, force) = match slash::rewind_arguments(argument) {
                    Ok(arguments) => arguments,
                    Err(e) => {
                        say!("error: {e}");
                        return Command::Done;
                    }
                };
                let snap = match to {
                    slash::RewindTo::Snapshot(snap) => snap,
                    slash::RewindTo::Turn(turn) => {
                        self.rewind_turn(
                            rt,
                            &store,
                            &id,
                            turn,
                            (mode, force),
                            checkpoints.as_ref(),
                        );
                        return Command::Done;
                    }
                };
                // The session's run lock is free only with the handle closed.
                self.close(rt);
                let shown = nop::checkpoint::rewind(
                    &store,
                    checkpoints.as_ref(),
                    &id,
                    &snap,
                    mode,
                    force,
                    chrono::Utc::now(),
                )
                .map_err(|e| e.to_string())
                .and_then(|r| {
                    render::rewind(&mut std::io::stderr(), &r, false, render::TypedIn::Session)
                        .map_err(|e| e.to_string())
                });
                if let Err(e) = shown {
                    say!("error: {e}");
                }
                self.reopen(rt, Some(id));
            }
            "/plan" | "/snapshot" => {
                let Some(id) = &self.session else {
                    say!("no session yet: say something first");
                    return Command::Done;
                };
                if name == "/plan" {
                    match store.read(id) {
                        Ok(state) => {
                            let style = term::style::Style::detect(true);
                            let lines = term::plan::checklist(&state.plan, style);
                            if lines.is_empty() {
                                say!("no tasks");
                            }
                            for line in lines {
                                say!("{line}");
                            }
                        }
                        Err(e) => say!("error: {e}"),
                    }
                } else {
                    match store.snapshot(id, chrono::Utc::now()) {
                        Ok(snap) => println!("snapshot {snap} (nop fork {id} --snapshot {snap})"),
                        Err(e) => say!("error: {e}"),
                    }
                }
            }
            other => {
                let custom = self.custom_commands();
                for w in &custom.found.warnings {
                    say!("warning: {}", term::style::one_line(w));
                }
                if let Some(text) = custom.expand(input) {
                    return Command::Run(Op::UserInput { text });
                }
                match slash::nearest(other) {
                    Some(near) => say!("unknown command {other}; did you mean {near}?"),
                    None => say!("unknown command {other}; /help lists them"),
                }
            }
        }
        Command::Done
    }

    /// `/rewind` alone: the session's runs in a picker, newest first; the one picked has its files
    /// and conversation taken back to where it began.
    fn rewind_to_a_turn(
        &mut self,
        rt: &tokio::runtime::Runtime,
        store: &nop::session::Store,
        id: &str,
        checkpoints: Option<&nop::checkpoint::Checkpoints>,
    ) -> Command {
        let file = match store.read_session(id) {
            Ok(file) => file,
            Err(e) => {
                say!("error: {e}");
                return Command::Done;
            }
        };
        let turns = slash::turn_entries(&file, checkpoints);
        if turns.is_empty() {
            say!("no runs to go back to yet; /rewind SNAP goes back to a snapshot:");
            for line in slash::rewind_points(store, id) {
                say!("{line}");
            }
            return Command::Done;
        }
        let Some(turn) = pick_turn("rewind to before which run", &turns) else {
            return Command::Done;
        };
        let mode = if checkpoints.is_some() {
            nop::checkpoint::RewindMode::Both
        } else {
            nop::checkpoint::RewindMode::Conversation
        };
        self.rewind_turn(rt, store, id, turn, (mode, false), checkpoints);
        Command::Done
    }

    /// `/undo` alone (and Esc Esc on an empty prompt): the points to go back to, each earlier
    /// prompt that changed files, newest first, in a picker; then one key says what goes back to
    /// where the prompt picked began: files and conversation, the files or the conversation.
    /// `/undo --force` and `/undo --turn N [--force]`: as `nop undo`.
    fn undo(
        &mut self,
        rt: &tokio::runtime::Runtime,
        store: &nop::session::Store,
        id: &str,
        argument: &str,
        checkpoints: Option<&nop::checkpoint::Checkpoints>,
    ) -> Command {
        let Some(c) = checkpoints else {
            say!(
                "error: file checkpoints are off (checkpoints.enabled); /rewind takes the conversation back"
            );
            return Command::Done;
        };
        if !argument.is_empty() {
            let (turn, force) = match slash::undo_arguments(argument) {
                Ok(arguments) => arguments,
                Err(e) => {
                    say!("error: {e}");
                    return Command::Done;
                }
            };
            // The session's run lock is free only with the handle closed.
            self.close(rt);
            let shown = nop::checkpoint::undo_turn(store, c, id, turn, force, chrono::Utc::now())
                .map_err(|e| e.to_string())
                .and_then(|u| {
                    render::undo(&mut std::io::stderr(), &u, false, render::TypedIn::Session)
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = shown {
                say!("error: {e}");
            }
            self.reopen(rt, Some(id.to_string()));
            return Command::Done;
        }
        let file = match store.read_session(id) {
            Ok(file) => file,
            Err(e) => {
                say!("error: {e}");
                return Command::Done;
            }
        };
        let changed_files = |n: &usize| {
            n.checked_sub(1)
                .and_then(|i| file.checkpoints.get(i))
                .is_some_and(|t| t.after.as_deref() != Some(t.before.as_str()))
        };
        let turns: Vec<(usize, String)> = slash::turn_entries(&file, checkpoints)
            .into_iter()
            .filter(|(n, _)| changed_files(n))
            .collect();
        if turns.is_empty() {
            say!(
                "no prompt of this session changed files yet: nothing to go back to (/rewind takes the conversation back)"
            );
            return Command::Done;
        }
        let Some(turn) = pick_turn("go back to before which prompt", &turns) else {
            return Command::Done;
        };
        use nop::checkpoint::RewindMode;
        let mode = match picker::key(
            "restore",
            &[
                ('b', "files and conversation"),
                ('f', "files only"),
                ('c', "conversation only"),
            ],
        ) {
            Ok(Some('b')) => RewindMode::Both,
            Ok(Some('f')) => RewindMode::Files,
            Ok(Some('c')) => RewindMode::Conversation,
            Ok(_) => return Command::Done,
            Err(e) => {
                say!("error: {e}");
                return Command::Done;
            }
        };
        self.rewind_turn(rt, store, id, turn, (mode, false), checkpoints);
        Command::Done
    }

    /// Takes the session back to where its run `turn` began (`mode`, `force`), and says what it
    /// did.
    fn rewind_turn(
        &mut self,
        rt: &tokio::runtime::Runtime,
        store: &nop::session::Store,
        id: &str,
        turn: usize,
        (mode, force): (nop::checkpoint::RewindMode, bool),
        checkpoints: Option<&nop::checkpoint::Checkpoints>,
    ) {
        // The session's run lock is free only with the handle closed.
        self.close(rt);
        let rewound = nop::checkpoint::rewind_turn(
            store,
            checkpoints,
            id,
            turn,
            mode,
            force,
            chrono::Utc::now(),
        )
        .map_err(|e| e.to_string())
        .and_then(|r| {
            render::rewind_turn(&mut std::io::stderr(), &r, false, render::TypedIn::Session)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = rewound {
            say!("error: {e}");
        }
        self.reopen(rt, Some(id.to_string()));
    }

    /// `/goal`: the session's goal and its checks; `/goal clear`; `/goal TEXT` sets one and
    /// starts working toward it.
    fn goal(&mut self, argument: &str) -> Command {
        let store = self.runtime.store().clone();
        let goal = self
            .session
            .as_ref()
            .and_then(|id| store.read_session(id).ok())
            .and_then(|s| s.goal);
        match argument {
            "" => match goal {
                None => say!("no goal: /goal TEXT sets one"),
                Some(goal) => {
                    say!(
                        "goal: {} ({}, {} checks)",
                        term::style::visible(&goal.objective),
                        goal.status.as_str(),
                        goal.checks.len()
                    );
                    if let Some(last) = goal.checks.last() {
                        say!("  last check: {}", term::style::visible(&last.reason));
                    }
                }
            },
            "clear" => match &self.session {
                Some(id) => match nop::agent::goal::clear(&store, id) {
                    Ok(true) => say!("goal cleared"),
                    Ok(false) => say!("no goal to clear"),
                    Err(e) => say!("error: {e}"),
                },
                None => say!("no goal to clear"),
            },
            objective => {
                return Command::Run(Op::Goal {
                    spec: nop::agent::goal::GoalSpec {
                        objective: objective.to_string(),
                        until: None,
                    },
                });
            }
        }
        Command::Done
    }
}

/// The run picked among `turns` (its number and its line), or `None` when cancelled.
fn pick_turn(question: &str, turns: &[(usize, String)]) -> Option<usize> {
    let lines: Vec<String> = turns.iter().map(|(_, line)| line.clone()).collect();
    match picker::pick(question, &lines) {
        Ok(Some(i)) => turns.get(i).map(|(turn, _)| *turn),
        Ok(None) => None,
        Err(e) => {
            say!("error: {e}");
            None
        }
    }
}
