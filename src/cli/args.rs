//! The command line as clap reads it: the global options, every command and its arguments.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use nop::permissions::ApprovalMode;

/// When to ask the person, as `--approval` spells it (the engine's [`ApprovalMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovalArg {
    /// Never ask: what needs approval is refused.
    Never,
    /// Ask where a rule says `ask`.
    OnRequest,
    /// Also ask before every call that can change something (shell, edits, plugin tools).
    Always,
    /// Read and plan only: nothing is changed and no command runs.
    Plan,
}

impl From<ApprovalArg> for ApprovalMode {
    fn from(a: ApprovalArg) -> ApprovalMode {
        match a {
            ApprovalArg::Never => ApprovalMode::Never,
            ApprovalArg::OnRequest => ApprovalMode::OnRequest,
            ApprovalArg::Always => ApprovalMode::Always,
            ApprovalArg::Plan => ApprovalMode::Plan,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum OutputFormat {
    /// The answer streamed to stdout; tool calls, retries and notes to stderr.
    #[default]
    Text,
    /// One JSON object at the end.
    Json,
    /// One JSON event per line as things happen.
    StreamJson,
    /// Text as where stdout is not a terminal, even on one: print mode (`nop -p`, `nop exec`).
    #[value(skip)]
    Plain,
    /// stream-json in Claude Code's shapes (`--events claude`).
    #[value(skip)]
    ClaudeStream,
    /// `codex exec --json`'s JSONL (`--json`, `--events codex`).
    #[value(skip)]
    CodexJson,
}

/// Whose shapes stream-json's events take (`--events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum EventShape {
    /// nop's own events (docs/running.md).
    #[default]
    Nop,
    /// Claude Code's stream-json (`system`/`init`, `assistant`, `user`, `result`).
    Claude,
    /// `codex exec --json` (`thread.started`, `item.*`, `turn.completed`).
    Codex,
}

/// A queued message's priority, as `--priority` spells it (the engine's `QueuePriority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PriorityArg {
    /// Waits until the current task is done.
    Normal,
    /// Put into the conversation at the next checkpoint (between tool calls).
    High,
    /// Like high, ahead of it.
    Urgent,
}

impl From<PriorityArg> for nop::queue::QueuePriority {
    fn from(p: PriorityArg) -> nop::queue::QueuePriority {
        match p {
            PriorityArg::Normal => nop::queue::QueuePriority::Normal,
            PriorityArg::High => nop::queue::QueuePriority::High,
            PriorityArg::Urgent => nop::queue::QueuePriority::Urgent,
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "nop",
    version,
    about = "A terminal coding agent whose sessions are plain files",
    override_usage = "nop [\"TASK\"]             a task; none: the interactive session
       nop -p \"TASK\"            print mode: the answer on stdout, as claude -p
       nop -c [\"TASK\"]          go on with the last session (-r: pick one)
       nop --model NAME \"TASK\"  another model for this run
       nop exec [--json] \"TASK\" as codex exec
       nop [OPTIONS] COMMAND    one of the commands below"
)]
pub struct Cli {
    /// Run as if nop was started in DIR.
    #[arg(short = 'C', long = "directory", global = true, value_name = "DIR")]
    pub directory: Option<PathBuf>,

    /// Lowest log level written to the log files: error, warn, info or debug.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Set a configuration key for this command, e.g. --set session.lock_timeout_s=30.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Who you are for priority-based sessions (default: NOP_USER, then the OS user).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,

    /// Without a command, on a terminal: an interactive session.
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// The JSON format a run prints its result in, when it is asked for one: a run that fails
    /// before it can report still ends with a result object.
    pub fn json_result(&self) -> Option<OutputFormat> {
        let format = match &self.command {
            Some(Command::Run(args) | Command::Exec(args)) => args.output_format,
            Some(Command::Resume { output_format, .. }) => *output_format,
            _ => return None,
        };
        if let Some(Command::Run(args) | Command::Exec(args)) = &self.command
            && (args.json || args.events == Some(EventShape::Codex))
        {
            return Some(OutputFormat::CodexJson);
        }
        matches!(format, OutputFormat::Json | OutputFormat::StreamJson).then_some(format)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent on a task: a new session, or `--session ID` to continue one (answering its
    /// question if it asked one). Without PROMPT on a terminal: an interactive session.
    Run(RunArgs),
    /// A headless run, as `codex exec`: `nop run --print`, the answer on stdout, tool calls and
    /// notes on stderr, nothing asked; without PROMPT it reads standard input.
    Exec(RunArgs),
    /// Go on with a session: ID, or a picker of recent sessions on a terminal (the most recent
    /// one elsewhere). With PROMPT it runs that headless; without, an interactive session.
    Resume {
        id: Option<String>,
        prompt: Option<String>,
        /// The model for this run (instead of `provider.model`).
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        output_format: OutputFormat,
    },
    /// Write nop's configuration, agents, permissions and prompts into .nop/ of the repository
    /// root, to customise them (optional: without them nop uses the same built-in texts).
    Init {
        /// Replace files that differ from the templates, keeping a .bak-<time> copy of each.
        #[arg(long)]
        force: bool,
    },
    /// What of this repository nop would run outside the sandbox, or let widen the agent's rules,
    /// that you have not trusted (hooks and the scripts they run, MCP servers, plugins, a
    /// `.nop/`, git hooks in the tree), each with why; `--yes` trusts all of it as it is now.
    Trust {
        /// Trust everything listed, as it is now.
        #[arg(long, conflicts_with = "revoke")]
        yes: bool,
        /// Take back the trust of a file (or of everything under a directory).
        #[arg(long, value_name = "PATH")]
        revoke: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List, show, check and create sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Show a session's plan: its tasks and their status.
    Plan {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a session's log (session.log).
    Log { id: String },
    /// Take an immutable snapshot of a session; prints the snapshot id.
    Snapshot { id: String },
    /// Fork a session into a new, independent one; prints the child's id.
    Fork {
        id: String,
        /// Fork from this existing snapshot instead of taking a new one.
        #[arg(long, value_name = "SNAP")]
        snapshot: Option<String>,
        /// Put the child in a new git worktree (branch nop/<child id>) holding the files as
        /// they were at the snapshot; default PATH: beside the repository, <name>-<child id>.
        #[arg(long, value_name = "PATH", num_args = 0..=1, require_equals = false)]
        worktree: Option<Option<PathBuf>>,
        #[arg(long)]
        json: bool,
    },
    /// Put back the files a session's last run that changed files changed (write-file,
    /// edit-file or the shell); files changed since by someone else are kept and named.
    Undo {
        /// The session (default: the most recent one).
        #[arg(long, short = 's', value_name = "ID")]
        session: Option<String>,
        /// The run to undo (1-based, as `nop undo` names them; default: the last one that
        /// changed files and is not undone yet).
        #[arg(long, value_name = "N")]
        turn: Option<usize>,
        /// Also overwrite files changed since the run; on a run undone already, put back the
        /// files its undo kept.
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Take a session back to a snapshot or to the start of one of its runs: its files, its
    /// conversation, or both (default).
    Rewind {
        #[arg(long, short = 's', value_name = "ID")]
        session: String,
        /// The snapshot (an id or a unique prefix; `nop sessions show ID` lists them).
        #[arg(long, value_name = "SNAPSHOT", required_unless_present = "turn")]
        to: Option<String>,
        /// The run to go back to the start of (1-based, as `nop undo` counts them).
        #[arg(long, value_name = "N", conflicts_with = "to")]
        turn: Option<usize>,
        /// Only the files.
        #[arg(long, conflicts_with_all = ["conversation", "both"])]
        files: bool,
        /// Only the conversation and plan.
        #[arg(long, conflicts_with = "both")]
        conversation: bool,
        /// Files and conversation (the default).
        #[arg(long)]
        both: bool,
        /// Also overwrite files changed outside nop's runs.
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Compact a session's conversation now (the full history stays in a snapshot).
    Compact { id: String },
    /// A conversation that feels like chatting with a person: it waits until you have finished
    /// typing, then answers in several messages.
    Chat {
        #[arg(long, short = 's', value_name = "ID")]
        session: Option<String>,
        #[arg(long, value_name = "NAME", conflicts_with = "session")]
        agent: Option<String>,
    },
    /// Send a message to a session: processed at once if nobody runs it, otherwise queued for
    /// the process that does (it reads its queue between tool calls).
    Send {
        #[arg(long, short = 's', value_name = "ID")]
        session: String,
        /// urgent and high go into the conversation at the next checkpoint; normal waits until
        /// the current task is done (default: queue.default_priority, high).
        #[arg(long, value_enum)]
        priority: Option<PriorityArg>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        output_format: OutputFormat,
        /// The message; `-` reads it from standard input.
        message: String,
    },
    /// Stop the task a session is running (in this or another terminal) at its next checkpoint.
    Stop {
        #[arg(long, short = 's', value_name = "ID")]
        session: String,
    },
    /// The agents of this repository.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// The plugins under .nop/plugins/: their state and their tools.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// The skills the agent can load (the repository's, yours, other agents' folders).
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// Your custom slash commands (.nop/commands/, .claude/commands/, ~/.claude/commands/).
    #[command(subcommand)]
    Commands(CommandsCommand),
    /// Long-term memory: each agent's summaries of earlier days, and search over them.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Show the effective configuration, or set a key in the repository's or your own file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Explain and validate the agents' permission files; import Claude Code's rules.
    #[command(subcommand)]
    Permissions(PermissionsCommand),
    /// The instruction files a session started here would read (yours, the repository's, their
    /// @imports), in the prompt's order, and what became of each.
    Instructions {
        /// Whose rules the @imports must pass.
        #[arg(long, default_value = "coder")]
        agent: String,
        #[arg(long)]
        json: bool,
    },
    /// The shell's confinement: what it is on this machine (`check`), and a command run under it
    /// (`run -- COMMAND`).
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// One line per session, newest first: id, agent, status, updated, messages, parent and its
    /// first prompt. Subagents' and advisors' sessions only with `--all`.
    List {
        #[arg(long)]
        json: bool,
        /// Also the sessions agents called (subagents, advisors) and runs that failed before the
        /// model answered.
        #[arg(long)]
        all: bool,
        /// At most this many.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// A session's details and messages.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Validate every file of one session or of all; changes nothing.
    Check {
        id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Create an empty session (for scripts); prints its id.
    New {
        #[arg(long, default_value = "coder")]
        agent: String,
    },
    /// Append one message to a session (for scripts); prints the new message count.
    Append(AppendArgs),
    /// Delete a session, once no other session refers to it (its forks, the subagents it
    /// called); refused while a process runs it or holds its lock.
    Delete {
        id: String,
        /// Delete it even though other sessions refer to it (forks keep their own copy of the
        /// snapshot they came from, so they still load).
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Your active and paused sessions (priority-based sessions) and recent pause/resume/refuse events.
    Stack {
        #[arg(long)]
        json: bool,
    },
    /// Write a session, and the sessions it was forked from, to one file that another clone
    /// imports (paths relative to the repository, secrets from the environment scrubbed).
    Export {
        id: String,
        /// The file to write (default: standard output).
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<String>,
    },
    /// Store a session's archive under the git ref `refs/nop/sessions/ID` and push it to
    /// REMOTE, so that it travels with the repository (no server needed).
    Push {
        id: String,
        #[arg(default_value = "origin")]
        remote: String,
    },
    /// Fetch `refs/nop/sessions/ID` from REMOTE and import the session it holds.
    Pull {
        id: String,
        #[arg(default_value = "origin")]
        remote: String,
    },
    /// Make an exported session resumable here (`nop -r ID`): refused whole for a damaged or
    /// newer archive, or a session that exists.
    Import {
        /// The archive (`-`: standard input).
        file: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Continue this session (id or unique prefix).
    #[arg(long, short = 's', value_name = "ID")]
    pub session: Option<String>,
    /// Continue the most recent session of this repository (not a subagent's).
    #[arg(long = "continue", short = 'c', conflicts_with_all = ["session", "agent"])]
    pub continue_last: bool,
    /// The model for this run (instead of `provider.model`).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The agent of a new session (default: agent.default, `coder`).
    #[arg(long, value_name = "NAME", conflicts_with = "session")]
    pub agent: Option<String>,
    /// Stop after this many model requests.
    #[arg(long, value_name = "N", value_parser = max_turns)]
    pub max_turns: Option<u32>,
    /// Stop before a model request that would take the run's cost (its subagents and advisors
    /// included) past this many US dollars (exit code 5; the session can be continued).
    #[arg(long, value_name = "USD", value_parser = budget)]
    pub max_budget_usd: Option<f64>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output_format: OutputFormat,
    /// Claude Code's `--allowedTools`: the only tools this run (and its subagents) may call,
    /// besides reading and the plan, as Claude Code names them (`Edit`, `Bash`,
    /// `mcp__server__tool`) or as nop does (`edit-file`); separated by commas or spaces. It
    /// never allows what the agent's rules deny.
    #[arg(long = "allowedTools", alias = "allowed-tools", value_name = "TOOLS")]
    pub allowed_tools: Vec<String>,
    /// Claude Code's `--disallowedTools`: tools this run (and its subagents) may not call.
    #[arg(
        long = "disallowedTools",
        alias = "disallowed-tools",
        value_name = "TOOLS"
    )]
    pub disallowed_tools: Vec<String>,
    /// Claude Code's `--permission-mode`: `default` and `acceptEdits` are `--approval
    /// on-request`, `plan` is `plan`, `dontAsk` is `never` (nop has no mode that lifts its
    /// rules: `bypassPermissions` is refused).
    #[arg(long, value_name = "MODE", conflicts_with = "approval")]
    pub permission_mode: Option<String>,
    /// Whole tool results and diffs in text output, as `/verbose` (stream-json and json always
    /// carry every event).
    #[arg(long)]
    pub verbose: bool,
    /// Whose shapes stream-json's events take: nop's, Claude Code's or Codex's.
    #[arg(long, value_enum, value_name = "SHAPE")]
    pub events: Option<EventShape>,
    /// `codex exec --json`: the events as Codex's JSONL (as `--output-format stream-json
    /// --events codex`).
    #[arg(long, conflicts_with_all = ["events", "output_format"])]
    pub json: bool,
    /// Print mode, as `claude -p`: headless even on a terminal, the answer on stdout (tool calls
    /// and notes on stderr), nothing asked; without PROMPT it reads standard input.
    #[arg(long, short = 'p')]
    pub print: bool,
    /// When to ask you before a tool call: never (what needs approval is refused), on-request
    /// (where a permission rule says `ask`), always (also before every shell command and edit),
    /// plan (read and plan only: nothing is changed). Default: the `approval` key (on-request).
    #[arg(long, value_enum)]
    pub approval: Option<ApprovalArg>,
    /// Approve what permission rules mark `ask` without asking (for CI; denials still apply).
    #[arg(long)]
    pub yes: bool,
    /// An emergency: this session's priority is raised by 20 (seed 000's dynamic priority).
    #[arg(long)]
    pub emergency: bool,
    /// Chat messages answered together as one batch (repeatable; instead of PROMPT): the model
    /// answers with several replies and their delays, returned at once without waiting them out.
    #[arg(long = "message", value_name = "TEXT", conflicts_with = "prompt")]
    pub messages: Vec<String>,
    /// An objective that outlives this prompt: whenever the agent stops, goal-checker decides
    /// whether it is met, and if not the run goes on with its reason (within --max-turns,
    /// --max-budget-usd and agent.goal_timeout_s). Exit code 6 when it ends not met.
    #[arg(long, value_name = "TEXT")]
    pub goal: Option<String>,
    /// With --goal: a command run in the agent's sandbox at each check; the goal is not met
    /// while it exits non-zero (e.g. `--until "cargo test"`).
    #[arg(long, value_name = "CMD", requires = "goal")]
    pub until: Option<String>,
    /// The task, or the answer to the agent's question; `-` reads it from standard input.
    pub prompt: Option<String>,
}

/// `--max-turns`, whose error says what it accepts (clap's own says "invalid digit found in
/// string").
fn max_turns(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("must be a whole number from 1 to {}", u32::MAX))
}

/// `--max-budget-usd`: a positive number of US dollars.
fn budget(text: &str) -> Result<f64, String> {
    text.trim()
        .trim_start_matches('$')
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n > 0.0 && *n <= 1_000_000.0)
        .ok_or_else(|| "must be a number of US dollars above 0, such as 0.50".to_string())
}

#[derive(Debug, Args)]
pub struct AppendArgs {
    pub id: String,
    /// system, user, assistant or tool.
    #[arg(long, default_value = "user")]
    pub role: String,
    /// The message text; `-` or nothing reads it from standard input.
    pub text: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// The agent's summaries, oldest first (`--all`: removed ones too).
    List {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// The agent's current prompt (initial prompt + summaries), or one summary with `--id`.
    Show {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove the latest summary (only the latest can be removed; it can be restored).
    Pop {
        #[arg(long)]
        agent: Option<String>,
        /// Refuse unless this is the latest summary.
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Bring back the most recently removed summary.
    Restore {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Search by date expression and keywords, Chinese or English: "上周 权限", "sandbox last week".
    Search {
        query: String,
        /// Only this agent's memory (default: every agent's).
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Summarise one day of the agent's sessions with the summarizer agent (default: yesterday).
    Summarize {
        #[arg(long)]
        agent: Option<String>,
        /// An ISO date or an expression such as "yesterday" or "前天".
        #[arg(long)]
        date: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Each plugin, whether it loaded (or why not), and its tools. Starts and stops MCP servers.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Each skill: name, where it was found, the first line of its description; then the ones
    /// shadowed by an earlier skill of the same name, and the files left out.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum CommandsCommand {
    /// Each custom slash command: name, arguments, description and file; then the shadowed ones.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Name, priority (with your overrides and the time of day), interruptible, enabled, description.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PermissionsCommand {
    /// The decision for one tool or path, and the rule (file and line) that made it.
    Explain {
        #[arg(long, default_value = "coder")]
        agent: String,
        /// Decide as a subagent called by this agent: the intersection of both rule sets.
        #[arg(long, value_name = "PARENT")]
        within: Option<String>,
        #[arg(long, conflicts_with = "path", required_unless_present = "path")]
        tool: Option<String>,
        #[arg(long)]
        path: Option<String>,
        #[arg(long, value_enum, default_value_t = AccessArg::Read)]
        access: AccessArg,
        #[arg(long)]
        json: bool,
    },
    /// Parse every permission file; exit 1 naming file and line if one is broken.
    Check,
    /// Translate Claude Code's permission rules (.claude/settings.json and
    /// .claude/settings.local.json) into the agent's permission file, printing every rule that
    /// cannot be translated and why.
    Import {
        /// Read this settings file instead (e.g. ~/.claude/settings.json).
        #[arg(long, value_name = "PATH")]
        from: Option<std::path::PathBuf>,
        /// The agent whose file gets the rules (agent-default.yml serves every agent without
        /// its own file).
        #[arg(long, default_value = "default")]
        agent: String,
        /// Print what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also import allow rules and additionalDirectories that reach outside the repository
        /// (a settings file in the repository may be the model's work).
        #[arg(long)]
        allow_outside: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// How shell commands are confined on this machine, and what each rule becomes for them.
    Check {
        /// The agent whose rules apply (default: agent.default).
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Run a command confined exactly as the agent's shell commands are, in the current
    /// directory: `nop sandbox run -- cargo test`.
    Run {
        /// The agent whose rules apply (default: agent.default).
        #[arg(long)]
        agent: Option<String>,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AccessArg {
    Read,
    Write,
}

/// What `--user` of `nop config set` stores. The flag shares its id with the global
/// `--user NAME` (clap would not have two `--user`s on one command), so it stores a value no
/// person is called, and a name given to the global flag is told apart from it.
pub const USER_FILE: &str = "\u{0}user-file";

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Every key with its effective value and where the value came from.
    Show {
        #[arg(long)]
        json: bool,
        /// Include this session's overrides (and its agent's).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Include this agent's overrides from agents.yml.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
    /// Set KEY to VALUE in the repository's .nop/config.yml, or with --user in your own
    /// ~/.config/nop/config.yml (under XDG_CONFIG_HOME if set), which serves every repository.
    /// The rest of the file, comments included, is kept; the value is checked first.
    Set {
        /// A key as `nop config show` lists it; `model`, `provider`, `base_url` and
        /// `api_key_env` are short for the `provider.` ones.
        key: String,
        /// YAML scalar syntax: `5`, `true`, `gpt-4.1`; a list as `["A", "B"]`.
        #[arg(allow_hyphen_values = true)]
        value: String,
        /// Write your user file instead of the repository's.
        #[arg(
            long = "user",
            id = "user",
            num_args = 0,
            default_missing_value = USER_FILE
        )]
        user_file: Option<String>,
    },
}
