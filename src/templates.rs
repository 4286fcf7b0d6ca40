//! The files `nop init` installs: this repository's own `.nop/`, embedded at build time. They are
//! also the built-in configuration of a repository without them: a missing file reads as its
//! template (`Workspace::read_file`, the permission loader). A leaf: it names no other module, so
//! `workspace`, `permissions` and `checkpoint` all read it without naming each other.

pub const FILES: &[(&str, &str)] = &[
    (".gitignore", include_str!("../.nop/.gitignore")),
    (
        ".permissions/agent-compression-advisor.yml",
        include_str!("../.nop/.permissions/agent-compression-advisor.yml"),
    ),
    (
        ".permissions/agent-consistency-checker.yml",
        include_str!("../.nop/.permissions/agent-consistency-checker.yml"),
    ),
    (
        ".permissions/agent-default.yml",
        include_str!("../.nop/.permissions/agent-default.yml"),
    ),
    (
        ".permissions/agent-goal-checker.yml",
        include_str!("../.nop/.permissions/agent-goal-checker.yml"),
    ),
    (
        ".permissions/agent-retry-advisor.yml",
        include_str!("../.nop/.permissions/agent-retry-advisor.yml"),
    ),
    (
        ".permissions/agent-splitter.yml",
        include_str!("../.nop/.permissions/agent-splitter.yml"),
    ),
    (
        ".permissions/agent-summarizer.yml",
        include_str!("../.nop/.permissions/agent-summarizer.yml"),
    ),
    (
        ".system/agents/coder.md",
        include_str!("../.nop/.system/agents/coder.md"),
    ),
    (
        ".system/agents/compression-advisor.md",
        include_str!("../.nop/.system/agents/compression-advisor.md"),
    ),
    (
        ".system/agents/consistency-checker.md",
        include_str!("../.nop/.system/agents/consistency-checker.md"),
    ),
    (
        ".system/agents/goal-checker.md",
        include_str!("../.nop/.system/agents/goal-checker.md"),
    ),
    (
        ".system/agents/retry-advisor.md",
        include_str!("../.nop/.system/agents/retry-advisor.md"),
    ),
    (
        ".system/agents/splitter.md",
        include_str!("../.nop/.system/agents/splitter.md"),
    ),
    (
        ".system/agents/summarizer.md",
        include_str!("../.nop/.system/agents/summarizer.md"),
    ),
    (
        ".system/skills/README.md",
        include_str!("../.nop/.system/skills/README.md"),
    ),
    (
        ".system/tools/README.md",
        include_str!("../.nop/.system/tools/README.md"),
    ),
    ("agents.yml", include_str!("../.nop/agents.yml")),
    ("config.yml", include_str!("../.nop/config.yml")),
];

/// The template of `.nop/<relative>`, if this build carries one.
pub fn get(relative: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(path, _)| *path == relative)
        .map(|(_, text)| *text)
}

/// The paths (relative to `.nop/`, without `dir`) of the templates under `dir`.
pub fn under(dir: &str) -> impl Iterator<Item = &'static str> + '_ {
    FILES
        .iter()
        .filter_map(move |(path, _)| path.strip_prefix(dir))
}
