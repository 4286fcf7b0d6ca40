//! Which new files git's ignore rules leave out, decided in process as the store's
//! `git ls-files -o --exclude-standard` decides it: a `.gitignore` in each directory on the
//! way (the deepest first), then the store's `info/exclude`, then `~/.config/git/ignore`; the
//! last pattern of a file that matches says, and nothing beneath a directory left out is
//! listed. Saves a checkpoint of a few new files the git process that would say it.
//!
//! Only what is sure to read as git reads it is decided here: a file with a carriage return,
//! a backslash, a trailing tab, a character class other than a plain set of letters, digits,
//! `.`, `_` and `-`, a `**` not standing for whole directories, bytes that are not UTF-8, a
//! `.gitignore` that is not a regular file (git does not follow a link to one) or one over
//! 256 KiB: then git is asked, as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use ignore::Match;

use super::scan::parent;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The largest ignore file read here.
const MOST_BYTES: u64 = 256 * 1024;

/// The ignore rules of one look at the tree, read as they are needed.
pub(super) struct Excludes {
    root: PathBuf,
    /// The exclude files outside the tree, the one that says first first.
    outside: Vec<Arc<Gitignore>>,
    /// Each directory's `.gitignore` (relative path of the directory), `None` for none.
    dirs: HashMap<String, Option<Arc<Gitignore>>>,
}

impl Excludes {
    /// The rules of the tree at `root`, with these exclude files outside it (the store's own
    /// first, then the user's); `None` when one cannot be read as git reads it.
    pub(super) fn new(root: &Path, outside: &[PathBuf]) -> Option<Excludes> {
        let mut files = Vec::new();
        for path in outside {
            // git follows a link here: it is not in the tree.
            files.extend(compiled(path, root, true)?);
        }
        Some(Excludes {
            root: root.to_path_buf(),
            outside: files,
            dirs: HashMap::new(),
        })
    }

    /// Parses the ignore files a checkpoint of changes most likely needs (the root's
    /// `.gitignore`, those outside the tree) ahead of it, while nothing waits: [`compiled`]
    /// keeps them for the process (a template `.gitignore` of 130 lines takes about 1 ms).
    pub(super) fn warm(root: &Path, outside: &[PathBuf]) {
        if let Some(mut excludes) = Excludes::new(root, outside) {
            let _ = excludes.gitignore("");
        }
    }

    /// Whether git lists the new file or link `path` (relative to the root) as untracked:
    /// no directory on its way left out, and not itself. `None` when unsure.
    pub(super) fn listed(&mut self, path: &str) -> Option<bool> {
        for (i, b) in path.bytes().enumerate() {
            if b == b'/' && self.excluded(&path[..i], true)? {
                return Some(false);
            }
        }
        Some(!self.excluded(path, false)?)
    }

    /// Whether the patterns say to leave `path` out, as git asks of an entry it finds.
    fn excluded(&mut self, path: &str, is_dir: bool) -> Option<bool> {
        let mut dir = parent(path);
        loop {
            if let Some(rules) = self.gitignore(dir)? {
                let rest = if dir.is_empty() {
                    path
                } else {
                    &path[dir.len() + 1..]
                };
                match rules.matched(rest, is_dir) {
                    Match::Ignore(_) => return Some(true),
                    Match::Whitelist(_) => return Some(false),
                    Match::None => {}
                }
            }
            if dir.is_empty() {
                break;
            }
            dir = parent(dir);
        }
        for rules in &self.outside {
            match rules.matched(path, is_dir) {
                Match::Ignore(_) => return Some(true),
                Match::Whitelist(_) => return Some(false),
                Match::None => {}
            }
        }
        Some(false)
    }

    /// The `.gitignore` of the directory `dir`; `None` when it cannot be read as git reads it.
    fn gitignore(&mut self, dir: &str) -> Option<Option<Arc<Gitignore>>> {
        if let Some(known) = self.dirs.get(dir) {
            return Some(known.clone());
        }
        let base = if dir.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir)
        };
        // git does not follow a link to a `.gitignore` in the tree.
        let rules = compiled(&base.join(".gitignore"), &base, false)?;
        self.dirs.insert(dir.to_string(), rules.clone());
        Some(rules)
    }
}

/// The ignore files parsed in this process, by path and base: their text, their patterns.
type Parsed = HashMap<(PathBuf, PathBuf), (Vec<u8>, Arc<Gitignore>)>;
static PARSED: OnceLock<Mutex<Parsed>> = OnceLock::new();

/// The patterns of the ignore file `path`, matched relative to `base`: `Some(None)` when there
/// is no such file, `None` when it cannot be read as git reads it. Parsed once per process
/// while the file's text stays the same.
fn compiled(path: &Path, base: &Path, follow: bool) -> Option<Option<Arc<Gitignore>>> {
    let bytes = match read_regular(path, follow) {
        Ok(bytes) => bytes?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(None),
        Err(_) => return None,
    };
    let key = (path.to_path_buf(), base.to_path_buf());
    let parsed = PARSED.get_or_init(Default::default);
    if let Ok(parsed) = parsed.lock()
        && let Some((text, rules)) = parsed.get(&key)
        && *text == bytes
    {
        return Some(Some(Arc::clone(rules)));
    }
    let text = std::str::from_utf8(&bytes).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut builder = GitignoreBuilder::new(base);
    for line in text.split('\n') {
        if !plain(line) {
            return None;
        }
        builder.add_line(None, line).ok()?;
    }
    let rules = Arc::new(builder.build().ok()?);
    if let Ok(mut parsed) = parsed.lock() {
        if parsed.len() > 256 {
            parsed.clear();
        }
        parsed.insert(key, (bytes, Arc::clone(&rules)));
    }
    Some(Some(rules))
}

/// The bytes of the regular file `path` (through a link only when `follow`): `None` for
/// anything else or more than [`MOST_BYTES`]. Never blocks on a named pipe.
fn read_regular(path: &Path, follow: bool) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = nix::fcntl::OFlag::O_NONBLOCK;
    if !follow {
        flags |= nix::fcntl::OFlag::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > MOST_BYTES {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(MOST_BYTES + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= MOST_BYTES).then_some(bytes))
}

/// Whether a line of an ignore file reads the same to git and to the `ignore` crate.
fn plain(line: &str) -> bool {
    if line.starts_with('#') {
        return true;
    }
    if line.contains(['\r', '\\']) {
        return false;
    }
    // git drops trailing spaces only.
    if line.trim_end_matches(' ').ends_with(char::is_whitespace) {
        return false;
    }
    // A plain set of characters in brackets, nothing git and the crate could read apart.
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open + 1..].find(']') else {
            return false;
        };
        let set = &rest[open + 1..open + 1 + close];
        if set.is_empty()
            || !set
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            || set.starts_with('-')
            || set.ends_with('-')
        {
            return false;
        }
        rest = &rest[open + 1 + close + 1..];
    }
    if line.contains(']') && !line.contains('[') {
        return false;
    }
    // `**` only as whole directories: at the start, at the end, or between slashes.
    let pattern = line.strip_prefix('!').unwrap_or(line);
    let mut from = 0;
    while let Some(at) = pattern[from..].find("**") {
        let at = from + at;
        let before = at == 0 || pattern.as_bytes()[at - 1] == b'/';
        let after = at + 2 == pattern.len() || pattern.as_bytes()[at + 2] == b'/';
        if !before || !after || pattern[at + 2..].starts_with('*') {
            return false;
        }
        from = at + 2;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::process::Command;

    /// A tree with ignore files at several depths, an exclude file of the store's and one of
    /// the user's: what git's `ls-files -o --exclude-standard` lists of every file, and what
    /// is decided here, must be the same.
    #[test]
    fn new_files_are_left_out_as_git_leaves_them_out() {
        let _serial = crate::checkpoint::serial();
        let (dir, store) = crate::checkpoint::bare_store();
        let root = dir.path().join("tree");
        let home = dir.path().join("home");
        let write = |path: &Path, text: &str| {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        write(
            &root.join(".gitignore"),
            "\u{feff}# comment\n*.log\n!keep.log\n/top-only.txt\nbuild/\ndocs/**/*.tmp\n\
             **/cache\nsrc/gen/\n*.py[cod]\nout/**\n!out/keep.txt\ntrailing.txt   \n\
             /nested/deeper/x.txt\n",
        );
        write(
            &root.join("src/.gitignore"),
            "!important.log\n*.bak\n/local.txt\nsub/*.c\n",
        );
        write(&root.join("src/sub/.gitignore"), "!b.bak\n*.h\n");
        write(&store.join("info/exclude"), "/.nop/\nsecret*\n!secret-ok\n");
        write(&home.join(".config/git/ignore"), "*.swp\n*.log\n");
        let files = [
            "a.log",
            "keep.log",
            "top-only.txt",
            "src/top-only.txt",
            "build/x.rs",
            "src/build/y.rs",
            "docs/a.tmp",
            "docs/x/y/b.tmp",
            "docs/x/c.md",
            "x/cache/d.rs",
            "cache/e.rs",
            "src/gen/f.rs",
            "gen/f.rs",
            "mod.pyc",
            "mod.pyd",
            "mod.pyx",
            "out/a.txt",
            "out/keep.txt",
            "trailing.txt",
            "src/important.log",
            "src/z.bak",
            "src/sub/b.bak",
            "src/sub/c.bak",
            "src/local.txt",
            "src/sub/local.txt",
            "src/sub/q.c",
            "src/sub/deep/q.c",
            "src/sub/w.h",
            "secret.txt",
            "src/secret-ok",
            "notes.swp",
            "nested/deeper/x.txt",
            "plain.rs",
            "src/plain.rs",
        ];
        for f in files {
            write(&root.join(f), "x\n");
        }
        let listed = Command::new("git")
            .args(["ls-files", "-z", "-o", "--exclude-standard", "--"])
            .args(files)
            .current_dir(&root)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_DIR", &store)
            .env("GIT_WORK_TREE", &root)
            .env("GIT_INDEX_FILE", dir.path().join("no-index"))
            .env("GIT_LITERAL_PATHSPECS", "1")
            .output()
            .expect("git");
        assert!(listed.status.success(), "{listed:?}");
        let mut by_git: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        by_git.sort();
        let mut excludes = Excludes::new(
            &root,
            &[store.join("info/exclude"), home.join(".config/git/ignore")],
        )
        .expect("read here");
        let mut here: Vec<String> = files
            .iter()
            .filter(|f| excludes.listed(f).expect("decided here"))
            .map(|f| f.to_string())
            .collect();
        here.sort();
        assert_eq!(here, by_git);
        assert!(by_git.contains(&"plain.rs".to_string()), "{by_git:?}");
        assert!(!by_git.contains(&"a.log".to_string()), "{by_git:?}");
    }

    #[test]
    fn the_roots_rules_are_parsed_ahead_and_kept_while_their_text_stays() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join(".gitignore");
        std::fs::write(&path, "*.log\n").expect("write");
        let parsed = || {
            PARSED
                .get()
                .and_then(|p| p.lock().ok())
                .and_then(|p| p.get(&(path.clone(), dir.path().to_path_buf())).cloned())
        };
        Excludes::warm(dir.path(), &[]);
        let (text, rules) = parsed().expect("parsed ahead");
        assert_eq!(text, b"*.log\n");
        let mut excludes = Excludes::new(dir.path(), &[]).expect("nothing outside");
        assert_eq!(excludes.listed("a.log"), Some(false));
        assert!(Arc::ptr_eq(&parsed().expect("kept").1, &rules));
        std::fs::write(&path, "*.txt\n").expect("write");
        let mut excludes = Excludes::new(dir.path(), &[]).expect("nothing outside");
        assert_eq!(excludes.listed("a.log"), Some(true), "the new text");
        assert!(!Arc::ptr_eq(&parsed().expect("kept").1, &rules));
    }

    #[test]
    fn what_could_read_apart_is_left_to_git() {
        for line in [
            "a\\ ",
            "\\#x",
            "x\r",
            "tab\t",
            "[!a]",
            "[^a]",
            "[[:alpha:]]",
            "[]a]",
            "[a-]",
            "a]",
            "a**b",
            "a/**b",
            "***",
        ] {
            assert!(!plain(line), "{line:?}");
        }
        for line in [
            "*.py[cod]",
            "build/",
            "**/x",
            "a/**/b",
            "a/**",
            "!x",
            "# [!",
        ] {
            assert!(plain(line), "{line:?}");
        }
        let dir = tempfile::tempdir().expect("temp");
        std::fs::write(dir.path().join("real"), "*.log\n").expect("write");
        std::os::unix::fs::symlink("real", dir.path().join(".gitignore")).expect("link");
        let mut excludes = Excludes::new(dir.path(), &[]).expect("nothing outside");
        assert_eq!(
            excludes.listed("a.log"),
            None,
            "a linked .gitignore: git says"
        );
        std::fs::remove_file(dir.path().join(".gitignore")).expect("rm");
        std::fs::write(dir.path().join(".gitignore"), b"\xff\n").expect("write");
        let mut excludes = Excludes::new(dir.path(), &[]).expect("nothing outside");
        assert_eq!(excludes.listed("a.log"), None, "not UTF-8: git says");
        // A named pipe is never read (it would block).
        std::fs::remove_file(dir.path().join(".gitignore")).expect("rm");
        nix::unistd::mkfifo(
            &dir.path().join(".gitignore"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .expect("mkfifo");
        let mut excludes = Excludes::new(dir.path(), &[]).expect("nothing outside");
        assert_eq!(excludes.listed("a.log"), None, "a pipe: git says");
        std::fs::remove_file(dir.path().join(".gitignore")).expect("rm");
        let mut excludes = Excludes::new(dir.path(), &[]).expect("nothing outside");
        assert_eq!(excludes.listed("a.log"), Some(true), "no rules: listed");
    }
}
