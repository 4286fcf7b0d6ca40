//! Agent Skills as users already have them: a folder holding a `SKILL.md` (YAML front matter
//! with `name` and `description`, then the instructions) and any files beside it, found in the
//! places nop and other agents keep them. The first skill of a name wins; the others are
//! shadowed and shown by `nop skills list`.
//!
//! Where, in this order: the repository's `.nop/.system/skills`, `.nop/skills`, `.agents/skills`,
//! `.claude/skills`; then `.agents/skills` and `.claude/skills` of the folders below its root
//! (`packages/web/.claude/skills`, shallowest first), as Claude Code and Codex find them; then
//! the user's `~/.nop/skills`, `~/.agents/skills`, `~/.claude/skills`, `~/.codex/skills`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The repository's skill folders, relative to its root, first wins.
pub const REPOSITORY_DIRS: &[&str] = &[
    ".nop/.system/skills",
    ".nop/skills",
    ".agents/skills",
    ".claude/skills",
];

/// The user's skill folders, relative to the home directory, after the repository's.
pub const USER_DIRS: &[&str] = &[
    ".nop/skills",
    ".agents/skills",
    ".claude/skills",
    ".codex/skills",
];

/// How many entries of one skills folder are looked at (a huge folder stays cheap).
const MAX_ENTRIES: usize = 1000;

/// The skill folders looked for in the folders below the repository's root.
pub const NESTED_DIRS: &[&str] = &[".agents/skills", ".claude/skills"];

/// How deep below the root, and how many folders in all, are looked at for nested skill
/// folders: a huge repository (or a home directory opened as one) stays cheap.
const NESTED_MAX_DEPTH: usize = 6;
const NESTED_MAX_FOLDERS: usize = 5000;

/// Folders never walked for nested skills even when no ignore file names them: they hold
/// other people's code, and many folders of it.
const NESTED_SKIPPED: &[&str] = &["node_modules", "target", "vendor", "__pycache__"];

/// The bytes the skills section of the system prompt may take at most: whole descriptions are
/// listed until it is spent, the skills that do not fit are counted and named if room is left.
pub const PROMPT_BUDGET: usize = 8 * 1024;

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its `name:` from the front matter, else its folder's name.
    pub name: String,
    /// Its `description:`, whole (possibly several lines); empty when there is none.
    pub description: String,
    /// Its folder, as found (not resolved).
    pub dir: PathBuf,
    /// The skills folder it was found in.
    pub source: PathBuf,
    /// Found in one of the user's folders, not the repository's.
    pub user: bool,
}

/// Every skill found, in the order of the folders (then by folder name).
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// The skills that can be loaded, one per name.
    pub skills: Vec<Skill>,
    /// Skills whose name an earlier one already has: they are not loaded.
    pub shadowed: Vec<Skill>,
    /// A SKILL.md that could not be read or whose front matter is not valid, one line each,
    /// naming the file; that skill is left out.
    pub warnings: Vec<String>,
}

impl Discovery {
    /// The loadable skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}

#[derive(Debug, Default, Deserialize)]
struct Meta {
    name: Option<String>,
    description: Option<String>,
}

/// The home directory from the process's `HOME`, when it is an absolute path.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}

/// The skills folders to look in, first wins, each with whether it is the user's; a folder
/// reached twice (HOME inside the repository) counts once.
pub fn roots(root: &Path, home: Option<&Path>) -> Vec<(PathBuf, bool)> {
    let mut roots: Vec<(PathBuf, bool)> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    let repository = REPOSITORY_DIRS
        .iter()
        .map(|d| (root.join(d), false))
        .chain(nested(root).into_iter().map(|d| (d, false)));
    let user = home
        .into_iter()
        .flat_map(|h| USER_DIRS.iter().map(move |d| (h.join(d), true)));
    for (dir, is_user) in repository.chain(user) {
        let key = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        if !seen.contains(&key) {
            seen.push(key);
            roots.push((dir, is_user));
        }
    }
    roots
}

/// The `.agents/skills` and `.claude/skills` folders of the folders below `root`, shallowest
/// first then by path. The walk respects `.gitignore` and `.ignore` files (also outside git),
/// skips hidden folders and [`NESTED_SKIPPED`], follows no link and stops at
/// [`NESTED_MAX_DEPTH`] and [`NESTED_MAX_FOLDERS`].
fn nested(root: &Path) -> Vec<PathBuf> {
    let walker = ignore::WalkBuilder::new(root)
        .standard_filters(true)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .max_depth(Some(NESTED_MAX_DEPTH))
        .filter_entry(|e| {
            e.file_type().is_some_and(|t| t.is_dir())
                && !NESTED_SKIPPED.contains(&e.file_name().to_string_lossy().as_ref())
        })
        .build();
    let mut found: Vec<(usize, PathBuf)> = Vec::new();
    for entry in walker.flatten().take(NESTED_MAX_FOLDERS) {
        if entry.depth() == 0 {
            continue;
        }
        for name in NESTED_DIRS {
            let dir = entry.path().join(name);
            if dir.is_dir() {
                found.push((entry.depth(), dir));
            }
        }
    }
    found.sort();
    found.into_iter().map(|(_, dir)| dir).collect()
}

/// The folders of `source` that hold a SKILL.md file, by name; hidden ones are skipped.
fn skill_folders(source: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(source) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .take(MAX_ENTRIES)
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.join("SKILL.md").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The skills of the repository at `root` and of the user whose home is `HOME` that the agent
/// may read (`readable`, over the SKILL.md's real path).
pub fn discover(root: &Path, readable: &dyn Fn(&Path) -> bool) -> Discovery {
    discover_in(root, home().as_deref(), readable)
}

/// The skills of the repository at `root` and of the user whose home is `home`. A skill is
/// listed only where the agent's rules let it read its SKILL.md, links resolved (`readable`
/// decides, over the real path): a folder linked into a denied directory (`private/**`) is
/// left out, one linked from a shared folder the rules let the agent read is listed. A
/// SKILL.md that is a link out of its own folder is left out.
pub fn discover_in(
    root: &Path,
    home: Option<&Path>,
    readable: &dyn Fn(&Path) -> bool,
) -> Discovery {
    let mut found = Discovery::default();
    for (source, user) in roots(root, home) {
        for dir in skill_folders(&source) {
            let file = dir.join("SKILL.md");
            match real_skill_file(&dir) {
                Some(real) if readable(&real) => {}
                Some(_) => {
                    found.warnings.push(format!(
                        "{}: the agent's rules do not let it read {}; this skill is left out",
                        file.display(),
                        if user { "it" } else { "where it leads" }
                    ));
                    continue;
                }
                None => {
                    found.warnings.push(format!(
                        "{}: a symbolic link out of its folder; this skill is left out",
                        file.display()
                    ));
                    continue;
                }
            }
            let skill = match read_skill(&file) {
                Ok(meta) => meta,
                Err(e) => {
                    found
                        .warnings
                        .push(format!("{}: {e}; this skill is left out", file.display()));
                    continue;
                }
            };
            let folder = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = skill
                .name
                .map(|n| n.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|n| !n.is_empty())
                .unwrap_or(folder);
            let skill = Skill {
                name,
                description: skill.description.unwrap_or_default().trim().to_string(),
                dir,
                source: source.clone(),
                user,
            };
            if found.get(&skill.name).is_some() {
                found.shadowed.push(skill);
            } else {
                found.skills.push(skill);
            }
        }
    }
    found
}

/// The real path of `dir`'s SKILL.md (links resolved), when it lies in the folder's real path.
fn real_skill_file(dir: &Path) -> Option<PathBuf> {
    let (dir, file) = (
        std::fs::canonicalize(dir).ok()?,
        std::fs::canonicalize(dir.join("SKILL.md")).ok()?,
    );
    (file.parent() == Some(dir.as_path())).then_some(file)
}

/// Why a SKILL.md is left out (its warning names the file).
#[derive(Debug, thiserror::Error)]
enum SkillFileError {
    #[error(transparent)]
    Read(#[from] std::io::Error),
    #[error(transparent)]
    FrontMatter(#[from] crate::front_matter::FrontMatterError),
}

fn read_skill(file: &Path) -> Result<Meta, SkillFileError> {
    let (text, _) = crate::front_matter::read_capped(file)?;
    Ok(crate::front_matter::parse::<Meta>(&text)?.0)
}

/// The folders of the user's skills (outside the repository) that the file tools may read:
/// each folder of a user skills folder that holds a SKILL.md, canonical. Never the root of the
/// file system, the home directory or a directory above it, nor one holding the repository (a
/// skill folder that is a link to such a place grants nothing); skills inside the repository
/// are under its own rules.
pub fn readable_dirs(root: &Path) -> Vec<PathBuf> {
    readable_dirs_in(root, home().as_deref())
}

/// [`readable_dirs`] for the user whose home is `home`.
pub fn readable_dirs_in(root: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let home_canonical = home.and_then(|h| std::fs::canonicalize(h).ok());
    let mut dirs = Vec::new();
    for (source, user) in roots(root, home) {
        if !user {
            continue;
        }
        for dir in skill_folders(&source) {
            // The folder, and the folder its SKILL.md really is in (a dotfiles manager may link
            // the file alone): both are the skill's.
            let real_file_dir = std::fs::canonicalize(dir.join("SKILL.md"))
                .ok()
                .and_then(|f| f.parent().map(Path::to_path_buf));
            for canonical in [std::fs::canonicalize(&dir).ok(), real_file_dir]
                .into_iter()
                .flatten()
            {
                let too_wide = canonical.parent().is_none()
                    || home_canonical
                        .as_ref()
                        .is_some_and(|h| h.starts_with(&canonical))
                    || root.starts_with(&canonical)
                    || canonical.starts_with(root);
                if !too_wide && !dirs.contains(&canonical) {
                    dirs.push(canonical);
                }
            }
        }
    }
    dirs
}

/// The skills section of the system prompt: every skill with its whole description (on one
/// line) while [`PROMPT_BUDGET`] lasts; the ones left out are counted, and named as far as the
/// budget's last part allows, since `load-skill` loads any of them by name.
pub fn prompt_section(skills: &[Skill], budget: usize) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut section =
        String::from("\n# Skills\nLoad one with the load-skill tool when it fits the task:\n");
    let mut left_out: Vec<&str> = Vec::new();
    for skill in skills {
        let description = skill.description.split_whitespace().collect::<Vec<_>>();
        let line = if description.is_empty() {
            format!("- {}\n", skill.name)
        } else {
            format!("- {}: {}\n", skill.name, description.join(" "))
        };
        // A quarter of the budget stays for naming what does not fit.
        if section.len() + line.len() <= budget - budget / 4 {
            section.push_str(&line);
        } else {
            left_out.push(&skill.name);
        }
    }
    if !left_out.is_empty() {
        let mut names = String::new();
        let mut named = 0;
        for name in &left_out {
            if section.len() + names.len() + name.len() + 2 > budget {
                break;
            }
            if !names.is_empty() {
                names.push_str(", ");
            }
            names.push_str(name);
            named += 1;
        }
        section.push_str(&format!(
            "- … and {} more skill(s) not described here (the list is limited to {} KB); \
             load-skill loads any of them by name",
            left_out.len(),
            budget / 1024
        ));
        if named > 0 {
            section.push_str(&format!(": {names}"));
            if named < left_out.len() {
                section.push_str(", …");
            }
        }
        section.push('\n');
    }
    section
}

/// The files of a skill's folder (SKILL.md aside), relative to it, directories walked a few
/// levels deep; symbolic links are listed but not followed. At most `limit` entries, and
/// whether there were more.
pub fn files(dir: &Path, limit: usize) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut more = false;
    let mut stack: Vec<(PathBuf, usize)> = vec![(dir.to_path_buf(), 0)];
    while let Some((at, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        let mut entries: Vec<_> = entries.take(MAX_ENTRIES).flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
            if relative == Path::new("SKILL.md") {
                continue;
            }
            if out.len() >= limit {
                more = true;
                break;
            }
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                out.push(format!("{}/", relative.display()));
                if depth < 3 {
                    stack.push((path, depth + 1));
                }
            } else {
                out.push(relative.display().to_string());
            }
        }
    }
    out.sort();
    (out, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(dir: &Path, folder: &str, text: &str) {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        std::fs::write(dir.join(folder).join("SKILL.md"), text).unwrap();
    }

    #[test]
    fn order_names_clashes_and_bad_front_matter() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        let home = tmp.path().join("home");
        skill(
            &root.join(".claude/skills"),
            "x",
            "---\nname: review\ndescription: repo\n---\n",
        );
        skill(
            &home.join(".claude/skills"),
            "review",
            "---\ndescription: user\n---\n",
        );
        skill(
            &home.join(".codex/skills"),
            "broken",
            "---\ndescription: [\n---\n",
        );
        skill(&home.join(".agents/skills"), "plain", "# no front matter\n");
        std::fs::create_dir_all(home.join(".codex/skills/empty")).unwrap();
        // A folder the rules hide is left out, wherever its SKILL.md really is.
        skill(&root.join("private"), "secret", "---\nname: secret\n---\n");
        std::os::unix::fs::symlink(
            root.join("private/secret"),
            root.join(".claude/skills/secret"),
        )
        .unwrap();
        let private = std::fs::canonicalize(root.join("private")).unwrap();
        let found = discover_in(&root, Some(&home), &|p| !p.starts_with(&private));
        let names: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["review", "plain"]);
        assert_eq!(found.skills[0].description, "repo");
        assert!(!found.skills[0].user && found.skills[1].user);
        assert_eq!(found.shadowed.len(), 1);
        assert_eq!(found.shadowed[0].description, "user");
        assert_eq!(found.warnings.len(), 2, "{:?}", found.warnings);
        assert!(found.warnings[0].contains("skills/secret/SKILL.md: the agent's rules"));
        let broken = format!(
            "{}: its front matter is not valid: ",
            home.join(".codex/skills/broken/SKILL.md").display()
        );
        assert!(
            found.warnings[1].starts_with(&broken)
                && found.warnings[1].ends_with("; this skill is left out"),
            "{:?}",
            found.warnings
        );
    }

    #[test]
    fn nested_skill_folders_are_found_below_the_root_and_not_in_ignored_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        let home = tmp.path().join("home");
        let front = |name: &str| format!("---\nname: {name}\ndescription: d\n---\n");
        skill(&root.join(".claude/skills"), "top", &front("top"));
        skill(&root.join("a/b/.agents/skills"), "deep", &front("deep"));
        skill(&root.join("a/.claude/skills"), "web", &front("web"));
        // A clash: the shallower one wins; the deeper one is shadowed.
        skill(&root.join("a/b/.claude/skills"), "web2", &front("web"));
        skill(
            &root.join("gone/.claude/skills"),
            "ignored",
            &front("ignored"),
        );
        skill(
            &root.join("node_modules/x/.claude/skills"),
            "dep",
            &front("dep"),
        );
        skill(
            &root.join(".hidden/.claude/skills"),
            "hidden",
            &front("hidden"),
        );
        let too_deep = root.join("1/2/3/4/5/6/7");
        skill(
            &too_deep.join(".claude/skills"),
            "too-deep",
            &front("too-deep"),
        );
        std::fs::write(root.join(".gitignore"), "gone/\n").unwrap();
        // A folder the rules hide is left out, as at the root.
        skill(
            &root.join("private/.claude/skills"),
            "secret",
            &front("secret"),
        );
        skill(&home.join(".claude/skills"), "mine", &front("mine"));
        let private = std::fs::canonicalize(root.join("private")).unwrap();
        let found = discover_in(&root, Some(&home), &|p| !p.starts_with(&private));
        let names: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["top", "web", "deep", "mine"]);
        assert!(found.skills[1].source.ends_with("a/.claude/skills"));
        assert!(!found.skills[2].user && found.skills[3].user);
        assert_eq!(found.shadowed.len(), 1);
        assert!(found.shadowed[0].dir.ends_with("a/b/.claude/skills/web2"));
        assert_eq!(found.warnings.len(), 1, "{:?}", found.warnings);
        assert!(found.warnings[0].contains("private/.claude/skills/secret/SKILL.md"));
    }

    #[test]
    fn the_prompt_section_keeps_whole_descriptions_within_its_budget() {
        let long = "word ".repeat(100);
        let skills: Vec<Skill> = (0..40)
            .map(|i| Skill {
                name: format!("skill-{i:02}"),
                description: long.clone(),
                dir: PathBuf::new(),
                source: PathBuf::new(),
                user: false,
            })
            .collect();
        let section = prompt_section(&skills, PROMPT_BUDGET);
        assert!(section.len() <= PROMPT_BUDGET, "{}", section.len());
        assert!(section.contains(&format!("- skill-00: {}\n", long.trim())));
        assert!(section.contains("more skill(s) not described here"));
        assert!(section.contains("skill-39"), "left-out names are given");
    }
}
