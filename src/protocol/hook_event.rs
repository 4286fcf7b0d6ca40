//! The events the user's hooks run at, typed: which events there are ([`Hook`]) and what each
//! carries ([`HookEvent`]). nop's own JSON for a hook is written here
//! ([`HookEvent::to_json`]); Claude Code's is made from the same event in one place
//! (`hooks::claude`).

use std::borrow::Cow;

use serde_json::{Map, Value, json};

/// The events hooks run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    SessionStart,
    UserPromptSubmit,
    BeforeTool,
    PermissionRequest,
    AfterTool,
    BeforeCompact,
    Notification,
    Stop,
    SubagentStop,
    SessionEnd,
}

impl Hook {
    /// The event's name, as in the configuration and the hook's JSON (`"event"`).
    pub fn name(self) -> &'static str {
        match self {
            Hook::SessionStart => "session-start",
            Hook::UserPromptSubmit => "user-prompt-submit",
            Hook::BeforeTool => "before-tool",
            Hook::PermissionRequest => "permission-request",
            Hook::AfterTool => "after-tool",
            Hook::BeforeCompact => "before-compact",
            Hook::Notification => "notification",
            Hook::Stop => "stop",
            Hook::SubagentStop => "subagent-stop",
            Hook::SessionEnd => "session-end",
        }
    }
}

/// The session an event is about, and its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About<'a> {
    pub session_id: &'a str,
    pub agent: &'a str,
}

/// What opened or closed a session: a run (with its input, its final message), or a chat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode<'a> {
    Run(Option<&'a str>),
    Chat,
}

/// One event, with what its hooks read.
#[derive(Debug, Clone, PartialEq)]
pub enum HookEvent<'a> {
    /// A run (`Mode::Run(input)`) or a chat opened the session, new or `resumed`.
    SessionStart {
        about: About<'a>,
        resumed: bool,
        mode: Mode<'a>,
    },
    UserPromptSubmit {
        about: About<'a>,
        prompt: &'a str,
    },
    /// `mention`: an `@path` of the prompt read as `tool` would read it (no `call_id` then:
    /// no model's call).
    BeforeTool {
        about: About<'a>,
        tool: &'a str,
        call_id: Option<&'a str>,
        arguments: Cow<'a, Value>,
        mention: bool,
    },
    PermissionRequest {
        about: About<'a>,
        tool: &'a str,
        arguments: &'a Value,
        detail: &'a str,
        reason: &'a str,
    },
    /// `output`: the result, or the error; hooks get its first 2,000 characters. Only for a
    /// call whose tool ran: one refused before (by a rule, a person, a before-tool hook) has
    /// none, as Claude Code's PostToolUse.
    AfterTool {
        about: About<'a>,
        tool: &'a str,
        call_id: &'a str,
        arguments: &'a Value,
        ok: bool,
        output: Cow<'a, str>,
    },
    BeforeCompact {
        about: About<'a>,
        reason: &'a str,
        /// Asked for (`nop compact`, `/compact`, the `compact` tool), not automatic.
        manual: bool,
        messages: usize,
    },
    Notification {
        about: About<'a>,
        kind: &'a str,
        message: Cow<'a, str>,
    },
    /// The agent answered; `active`: a stop hook kept it going already.
    Stop {
        about: About<'a>,
        final_message: &'a str,
        active: bool,
    },
    /// A subagent called by session `caller` answered.
    SubagentStop {
        about: About<'a>,
        caller: &'a str,
        final_message: &'a str,
        active: bool,
    },
    /// The session's run ended with `status` (`Mode::Run(final message)`), or its chat closed.
    SessionEnd {
        about: About<'a>,
        status: &'a str,
        mode: Mode<'a>,
    },
}

/// How much of a tool's output a hook reads.
pub const HOOK_OUTPUT_CHARS: usize = 2000;

/// What hooks read of a call's `output`: its first [`HOOK_OUTPUT_CHARS`] characters, or the
/// whole error when it failed.
pub fn what_hooks_read(ok: bool, output: &str) -> String {
    if ok {
        output.chars().take(HOOK_OUTPUT_CHARS).collect()
    } else {
        output.to_string()
    }
}

impl HookEvent<'_> {
    pub fn hook(&self) -> Hook {
        match self {
            HookEvent::SessionStart { .. } => Hook::SessionStart,
            HookEvent::UserPromptSubmit { .. } => Hook::UserPromptSubmit,
            HookEvent::BeforeTool { .. } => Hook::BeforeTool,
            HookEvent::PermissionRequest { .. } => Hook::PermissionRequest,
            HookEvent::AfterTool { .. } => Hook::AfterTool,
            HookEvent::BeforeCompact { .. } => Hook::BeforeCompact,
            HookEvent::Notification { .. } => Hook::Notification,
            HookEvent::Stop { .. } => Hook::Stop,
            HookEvent::SubagentStop { .. } => Hook::SubagentStop,
            HookEvent::SessionEnd { .. } => Hook::SessionEnd,
        }
    }

    pub fn about(&self) -> About<'_> {
        match self {
            HookEvent::SessionStart { about, .. }
            | HookEvent::UserPromptSubmit { about, .. }
            | HookEvent::BeforeTool { about, .. }
            | HookEvent::PermissionRequest { about, .. }
            | HookEvent::AfterTool { about, .. }
            | HookEvent::BeforeCompact { about, .. }
            | HookEvent::Notification { about, .. }
            | HookEvent::Stop { about, .. }
            | HookEvent::SubagentStop { about, .. }
            | HookEvent::SessionEnd { about, .. } => *about,
        }
    }

    /// The tool a tool event is about, and its arguments.
    pub fn tool(&self) -> Option<(&str, &Value)> {
        match self {
            HookEvent::BeforeTool {
                tool, arguments, ..
            } => Some((tool, arguments)),
            HookEvent::PermissionRequest {
                tool, arguments, ..
            }
            | HookEvent::AfterTool {
                tool, arguments, ..
            } => Some((tool, arguments)),
            _ => None,
        }
    }

    /// The model's id of the call a tool event is about (none for an `@path` of the prompt).
    pub fn call_id(&self) -> Option<&str> {
        match self {
            HookEvent::BeforeTool { call_id, .. } => *call_id,
            HookEvent::AfterTool { call_id, .. } => Some(call_id),
            _ => None,
        }
    }

    /// nop's JSON for the event, its `event` name last.
    pub fn to_json(&self) -> Value {
        let about = self.about();
        let mut out = Map::new();
        let mut put = |key: &str, value: Value| {
            out.insert(key.to_string(), value);
        };
        put("session_id", json!(about.session_id));
        put("agent", json!(about.agent));
        if let Some(id) = self.call_id() {
            put("call_id", json!(id));
        }
        match self {
            HookEvent::SessionStart { resumed, mode, .. } => {
                put("resumed", json!(resumed));
                match mode {
                    Mode::Run(input) => put("input", json!(input)),
                    Mode::Chat => put("mode", json!("chat")),
                }
            }
            HookEvent::UserPromptSubmit { prompt, .. } => put("prompt", json!(prompt)),
            HookEvent::BeforeTool {
                tool,
                arguments,
                mention,
                ..
            } => {
                put("tool", json!(tool));
                put("arguments", arguments.clone().into_owned());
                if *mention {
                    put("mention", json!(true));
                }
            }
            HookEvent::PermissionRequest {
                tool,
                arguments,
                detail,
                reason,
                ..
            } => {
                put("tool", json!(tool));
                put("arguments", (*arguments).clone());
                put("detail", json!(detail));
                put("reason", json!(reason));
            }
            HookEvent::AfterTool {
                tool,
                arguments,
                ok,
                output,
                ..
            } => {
                put("tool", json!(tool));
                put("arguments", (*arguments).clone());
                put("ok", json!(ok));
                let output = what_hooks_read(*ok, output);
                put("output", json!(output));
            }
            HookEvent::BeforeCompact {
                reason,
                manual,
                messages,
                ..
            } => {
                put("reason", json!(reason));
                put("trigger", json!(if *manual { "manual" } else { "auto" }));
                put("messages", json!(messages));
            }
            HookEvent::Notification { kind, message, .. } => {
                put("kind", json!(kind));
                put("message", json!(message));
            }
            HookEvent::Stop {
                final_message,
                active,
                ..
            } => {
                put("final_message", json!(final_message));
                put("stop_hook_active", json!(active));
            }
            HookEvent::SubagentStop {
                caller,
                final_message,
                active,
                ..
            } => {
                put("caller_session_id", json!(caller));
                put("final_message", json!(final_message));
                put("stop_hook_active", json!(active));
            }
            HookEvent::SessionEnd { status, mode, .. } => {
                put("status", json!(status));
                match mode {
                    Mode::Run(message) => put("final_message", json!(message)),
                    Mode::Chat => put("mode", json!("chat")),
                }
            }
        }
        put("event", json!(self.hook().name()));
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const ABOUT: About<'static> = About {
        session_id: "s1",
        agent: "coder",
    };

    #[test]
    fn each_event_is_written_as_nops_hooks_read_it() {
        let args = json!({"command": "ls"});
        let cases = [
            (
                HookEvent::SessionStart {
                    about: ABOUT,
                    resumed: false,
                    mode: Mode::Run(Some("fix it")),
                },
                r#"{"session_id":"s1","agent":"coder","resumed":false,"input":"fix it","event":"session-start"}"#,
            ),
            (
                HookEvent::SessionEnd {
                    about: ABOUT,
                    status: "idle",
                    mode: Mode::Chat,
                },
                r#"{"session_id":"s1","agent":"coder","status":"idle","mode":"chat","event":"session-end"}"#,
            ),
            (
                HookEvent::AfterTool {
                    about: ABOUT,
                    tool: "shell",
                    call_id: "c1",
                    arguments: &args,
                    ok: true,
                    output: Cow::Owned("x".repeat(3000)),
                },
                &format!(
                    r#"{{"session_id":"s1","agent":"coder","call_id":"c1","tool":"shell","arguments":{{"command":"ls"}},"ok":true,"output":"{}","event":"after-tool"}}"#,
                    "x".repeat(2000)
                ),
            ),
            (
                HookEvent::SubagentStop {
                    about: ABOUT,
                    caller: "parent",
                    final_message: "done",
                    active: true,
                },
                r#"{"session_id":"s1","agent":"coder","caller_session_id":"parent","final_message":"done","stop_hook_active":true,"event":"subagent-stop"}"#,
            ),
            (
                HookEvent::BeforeCompact {
                    about: ABOUT,
                    reason: "requested",
                    manual: true,
                    messages: 12,
                },
                r#"{"session_id":"s1","agent":"coder","reason":"requested","trigger":"manual","messages":12,"event":"before-compact"}"#,
            ),
        ];
        for (event, json) in cases {
            assert_eq!(event.to_json().to_string(), json);
        }
    }
}
