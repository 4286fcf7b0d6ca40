//! The architecture, checked from the source text (issues 27 and 41): no import circle between
//! the library's top-level modules (`src/<module>/` and `src/<file>.rs` under `src/lib.rs`), none
//! through a re-export, no circle between the files of any of them (`src/session/`,
//! `src/agent/`, …), and none between the files of the binary's `cli` (`src/cli/`, at any
//! level: `cli`, `cli::term`, `cli::output`, …).
//!
//! Each crate is scanned on its own: the library is every `src/**/*.rs` but `src/main.rs`,
//! `src/cli/` and `src/bin/`; the binary is `src/main.rs` (its root, what `crate::` names there)
//! and `src/cli/`, where `nop::…` paths are the library, outside the graph like any other crate.
//! What counts as a reference, comments and string literals blanked out first:
//! - every path of a `use` tree (`pub` or not, braces expanded) that starts with `crate::`,
//!   `super::` or `self::`, or with a module or name in scope where the `use` is;
//! - every `crate::…`, `super::…` and `self::…` path written in code (`super::` counted from the
//!   inline module it is written in, such as `mod tests`).
//!
//! Each path is made absolute, then followed through the `use` declarations of the modules it
//! passes (`pub use` re-exports, and the private imports a child reaches with `super::`) to the
//! module that defines the item: `crate::agent::RunError` counts as `agent::runtime`. A
//! reference from module A to module B, A ≠ B, is an edge A → B; a re-export is itself an edge
//! from the module that re-exports to the one that defines. Glob imports (`use x::*`) count as an
//! edge to `x` but are not followed further. Macros (`$crate`) and `#[path]` are not used in
//! either crate and not handled.
//!
//! Test code (`#[cfg(test)] mod …` and `#[cfg(test)] use …`) is left out: a unit test may build
//! its fixture with a module above its own (`workspace::init` in a permissions test). In the file
//! graph of a module, its `mod.rs` (or `<module>.rs` over `<module>/`) using its own files
//! (re-exporting or calling them) is the module's facade and makes no edge; a path through a
//! re-export counts as an edge to the file that defines the item, so `summarize.rs`'s
//! `super::RunError` is an edge to the file `RunError` is defined in, and `cli/output/mod.rs`'s
//! `super::OutputFormat` one to `cli/args.rs`.
//!
//! The layering these tests keep is drawn in AGENTS.md ("Layers").

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use regex::Regex;

/// One source file: its module path (`["agent", "runtime"]`) and its text with comments and
/// literals blanked (line numbers kept).
struct SourceFile {
    rel: String,
    module: Vec<String>,
    text: String,
}

/// A path written in a file, made absolute but not yet resolved.
struct Reference {
    file: usize,
    line: usize,
    /// The module the reference is written in (the file's, or an inline module's).
    from: Vec<String>,
    /// Absolute path, `crate` left out.
    path: Vec<String>,
    written: String,
    /// Written in `#[cfg(test)]` code.
    test: bool,
}

/// What a module's `use` declarations bind: name → absolute path.
type Bindings = BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>;

/// An edge's evidence: where it is written and what.
type Edges = BTreeMap<(String, String), Vec<String>>;

/// Which crate's files a scan reads: the library's, or the binary's (`src/main.rs` and
/// `src/cli/`). They share `src/` but not `crate::`, so each is a graph of its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Crate {
    Library,
    Binary,
}

impl Crate {
    /// Whether the file at `rel` (relative to `src/`) belongs to this crate.
    fn holds(self, rel: &str) -> bool {
        let binary = rel == "main.rs" || rel.starts_with("cli/");
        match self {
            Crate::Library => !binary && !rel.starts_with("bin/"),
            Crate::Binary => binary,
        }
    }
}

fn source_files(krate: Crate) -> Vec<SourceFile> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    collect(&src, &mut paths);
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        let rel = path
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if !krate.holds(&rel) {
            continue;
        }
        let mut module: Vec<String> = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_string)
            .collect();
        // A crate's root (`lib.rs`, `main.rs`) and a directory's `mod.rs` are the module itself.
        if module
            .last()
            .is_some_and(|last| last == "mod" || last == "lib" || last == "main")
        {
            module.pop();
        }
        let text = fs::read_to_string(&path).expect("read source");
        files.push(SourceFile {
            rel: format!("src/{rel}"),
            module,
            text: blank_comments_and_literals(&text),
        });
    }
    files
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Comments, string, raw string and char literals become spaces; newlines stay, so line numbers
/// and braces in code are what the compiler sees.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, slice: &[char]| {
        for &c in slice {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && is_ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &chars[i..j.min(chars.len())]);
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(chars.len());
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if !prev_ident && (c == 'r' || ((c == 'b' || c == 'c') && next == Some('r'))) {
            let start = if c == 'r' { i + 1 } else { i + 2 };
            let hashes = chars[start..].iter().take_while(|&&c| c == '#').count();
            if chars.get(start + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let mut j = start + hashes + 1;
            let closes =
                |j: usize| chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#'));
            while j < chars.len() && !closes(j) {
                j += 1;
            }
            let end = (j + 1 + hashes).min(chars.len());
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7f}'), or a lifetime ('a) left as it is.
            let end = if next == Some('\\') {
                let mut j = i + 2;
                j += 1;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                Some(j + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    let end = end.min(chars.len());
                    blank(&mut out, &chars[i..end]);
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Inline modules (`mod tests { … }`) of a file: (start, end, name) byte ranges of their bodies.
fn inline_modules(text: &str) -> Vec<(usize, usize, String)> {
    let re = Regex::new(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{").expect("regex");
    let mut found = Vec::new();
    for caps in re.captures_iter(text) {
        let whole = caps.get(0).expect("match");
        let open = whole.end() - 1;
        let mut depth = 0usize;
        let mut end = text.len();
        for (offset, b) in text.as_bytes()[open..].iter().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + offset;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((open, end, caps[1].to_string()));
    }
    found
}

/// The module a byte offset of a file is in.
fn module_at(file: &SourceFile, inline: &[(usize, usize, String)], at: usize) -> Vec<String> {
    let mut module = file.module.clone();
    // Ranges come in order of their opening brace, so nested ones follow their parent.
    for (start, end, name) in inline {
        if *start < at && at < *end {
            module.push(name.clone());
        }
    }
    module
}

/// One path of an expanded `use` tree: its segments (a glob ends in `*`) and the name it binds.
struct UseItem {
    segments: Vec<String>,
    binds: Option<String>,
}

/// `a::{b, c::{self, D as E}, f::*}` → `a::b`, `a::c`, `a::c::D` (as E), `a::f::*`.
fn expand_use_tree(tree: &str) -> Vec<UseItem> {
    let token = Regex::new(r"::|[A-Za-z_][A-Za-z0-9_]*|[{},*]").expect("regex");
    let tokens: Vec<&str> = token.find_iter(tree).map(|m| m.as_str()).collect();
    let mut items = Vec::new();
    let mut pos = 0;
    parse_tree(&tokens, &mut pos, &[], &mut items);
    items
}

fn parse_tree(tokens: &[&str], pos: &mut usize, prefix: &[String], items: &mut Vec<UseItem>) {
    let mut path = prefix.to_vec();
    while let Some(&tok) = tokens.get(*pos) {
        *pos += 1;
        match tok {
            "::" => continue,
            "*" => {
                path.push("*".to_string());
                items.push(UseItem {
                    segments: path,
                    binds: None,
                });
                return;
            }
            "{" => loop {
                match tokens.get(*pos) {
                    None => return,
                    Some(&"}") => {
                        *pos += 1;
                        return;
                    }
                    Some(&",") => *pos += 1,
                    Some(_) => parse_tree(tokens, pos, &path, items),
                }
            },
            "}" | "," => {
                *pos -= 1;
                break;
            }
            "as" => {
                let alias = tokens.get(*pos).map(|s| s.to_string());
                *pos += 1;
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                items.push(UseItem {
                    segments: path,
                    binds: alias.filter(|a| a != "_"),
                });
                return;
            }
            ident => path.push(ident.to_string()),
        }
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    let binds = path.last().cloned();
    items.push(UseItem {
        segments: path,
        binds,
    });
}

/// `crate::`, `super::` and `self::` paths made absolute from `module`; `None` for a path that
/// starts elsewhere.
fn absolute(module: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut base = module.to_vec();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module that defines what `path` names, following `use` declarations.
fn resolve(path: &[String], modules: &BTreeSet<Vec<String>>, bindings: &Bindings) -> Vec<String> {
    let mut path = path.to_vec();
    for _ in 0..32 {
        let known = (0..=path.len())
            .rev()
            .find(|&n| modules.contains(&path[..n]))
            .unwrap_or(0);
        let Some(name) = path.get(known) else { break };
        let Some(target) = bindings.get(&path[..known]).and_then(|b| b.get(name)) else {
            break;
        };
        let mut next = target.clone();
        next.extend(path[known + 1..].iter().cloned());
        if next == path {
            break;
        }
        path = next;
    }
    path
}

struct Scan {
    files: Vec<SourceFile>,
    modules: BTreeSet<Vec<String>>,
    file_modules: BTreeSet<Vec<String>>,
    refs: Vec<Reference>,
    bindings: Bindings,
}

fn scan() -> Scan {
    scan_crate(Crate::Library)
}

/// The binary's files: `crate::` is `src/main.rs`, and `nop::…` (the library) is outside the
/// graph, like any other crate.
fn scan_binary() -> Scan {
    scan_crate(Crate::Binary)
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn scan_crate(krate: Crate) -> Scan {
    let files = source_files(krate);
    let use_re = Regex::new(r"(?:\b(pub)(?:\s*\([^)]*\))?\s+)?\b(use)\s+((?:::)?[A-Za-z_{][^;]*);")
        .expect("regex");
    let path_re =
        Regex::new(r"\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+").expect("regex");

    let file_modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut modules = file_modules.clone();
    let inline: Vec<_> = files.iter().map(|f| inline_modules(&f.text)).collect();
    for (file, inline) in files.iter().zip(&inline) {
        for (start, _, name) in inline {
            let mut module = module_at(file, inline, *start);
            module.push(name.clone());
            modules.insert(module);
        }
    }

    // `#[cfg(test)] mod x` (inline or a file) and `#[cfg(test)] use …`.
    let test_mod_re =
        Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)")
            .expect("regex");
    let test_use_re =
        Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?use\s").expect("regex");
    let mut test_modules = BTreeSet::new();
    let mut test_uses = BTreeSet::new();
    for (index, (file, inline)) in files.iter().zip(&inline).enumerate() {
        for caps in test_mod_re.captures_iter(&file.text) {
            let mut module = module_at(file, inline, caps.get(0).expect("match").start());
            module.push(caps[1].to_string());
            test_modules.insert(module);
        }
        for found in test_use_re.find_iter(&file.text) {
            test_uses.insert((index, found.end() - 4));
        }
    }
    let in_test = |from: &[String]| test_modules.iter().any(|t| from.starts_with(t));

    // Pass 1: the `use` declarations, written as they are.
    let mut uses = Vec::new();
    for (index, (file, inline)) in files.iter().zip(&inline).enumerate() {
        for caps in use_re.captures_iter(&file.text) {
            let at = caps.get(2).expect("use").start();
            let from = module_at(file, inline, at);
            let line = file.text[..at].lines().count().max(1);
            let test = in_test(&from) || test_uses.contains(&(index, at));
            for item in expand_use_tree(&caps[3]) {
                uses.push((index, line, from.clone(), item, test));
            }
        }
    }

    // A `use` path that does not start with crate/super/self starts with a child module or a
    // name bound in the same module (or an external crate, left out).
    let mut bindings = Bindings::new();
    let mut refs = Vec::new();
    let mut pending = Vec::new();
    for (file, line, from, item, test) in uses {
        let written = item.segments.join("::");
        let path = absolute(&from, &item.segments).or_else(|| {
            let first = item.segments.first()?;
            let mut child = from.clone();
            child.push(first.clone());
            modules.contains(&child).then(|| {
                let mut path = from.clone();
                path.extend(item.segments.iter().cloned());
                path
            })
        });
        match path {
            Some(path) => {
                if let Some(name) = &item.binds {
                    bindings
                        .entry(from.clone())
                        .or_default()
                        .insert(name.clone(), path.clone());
                }
                refs.push(Reference {
                    file,
                    line,
                    from,
                    path,
                    written,
                    test,
                });
            }
            None => pending.push((file, line, from, item, written, test)),
        }
    }
    for (file, line, from, item, written, test) in pending {
        let Some(first) = item.segments.first() else {
            continue;
        };
        let Some(base) = bindings.get(&from).and_then(|b| b.get(first)).cloned() else {
            continue;
        };
        let mut path = base;
        path.extend(item.segments[1..].iter().cloned());
        if let Some(name) = &item.binds {
            bindings
                .entry(from.clone())
                .or_default()
                .insert(name.clone(), path.clone());
        }
        refs.push(Reference {
            file,
            line,
            from,
            path,
            written,
            test,
        });
    }
    for refer in &mut refs {
        if refer.path.last().is_some_and(|s| s == "*") {
            refer.path.pop();
        }
    }

    // Pass 2: paths written in code, outside `use` declarations.
    for (index, (file, inline)) in files.iter().zip(&inline).enumerate() {
        let in_use: Vec<(usize, usize)> = use_re
            .find_iter(&file.text)
            .map(|m| (m.start(), m.end()))
            .collect();
        for found in path_re.find_iter(&file.text) {
            let at = found.start();
            if in_use.iter().any(|&(s, e)| s <= at && at < e) {
                continue;
            }
            let segments: Vec<String> = found.as_str().split("::").map(str::to_string).collect();
            let from = module_at(file, inline, at);
            let Some(path) = absolute(&from, &segments) else {
                continue;
            };
            refs.push(Reference {
                file: index,
                line: file.text[..at].lines().count().max(1),
                test: in_test(&from),
                from,
                path,
                written: found.as_str().to_string(),
            });
        }
    }

    Scan {
        files,
        modules,
        file_modules,
        refs,
        bindings,
    }
}

impl Scan {
    /// Edges between nodes named by `node` (a module path → its node, `None` outside the graph).
    fn edges(
        &self,
        counts: impl Fn(&Reference) -> bool,
        node: impl Fn(&[String]) -> Option<String>,
    ) -> Edges {
        let mut edges = Edges::new();
        for refer in self.refs.iter().filter(|r| counts(r)) {
            let target = resolve(&refer.path, &self.modules, &self.bindings);
            let (Some(from), Some(to)) = (node(&refer.from), node(&target)) else {
                continue;
            };
            if from != to {
                let file = &self.files[refer.file];
                edges.entry((from, to)).or_default().push(format!(
                    "{}:{}: {}{}",
                    file.rel,
                    refer.line,
                    refer.written,
                    if refer.test { " (test)" } else { "" }
                ));
            }
        }
        edges
    }

    fn top_level(&self) -> Edges {
        let tops: BTreeSet<String> = self
            .file_modules
            .iter()
            .filter_map(|m| m.first().cloned())
            .collect();
        self.edges(
            |r| !r.test,
            |path| path.first().filter(|m| tops.contains(*m)).cloned(),
        )
    }

    /// The files of one top-level module: a path's node is the file that defines it.
    ///
    /// A module's root using its own descendants (`mod.rs` re-exporting or calling them) is its
    /// facade, not a dependency of its code: it makes no edge here (the paths that go through a
    /// re-export are followed to the defining file).
    fn files_of(&self, top: &str) -> Edges {
        let facade = |r: &Reference| r.path.starts_with(&r.from);
        self.edges(
            |r| !r.test && !facade(r),
            |path| {
                if path.first().is_none_or(|m| m != top) {
                    return None;
                }
                (1..=path.len())
                    .rev()
                    .find(|&n| self.file_modules.contains(&path[..n]))
                    .map(|n| path[..n].join("::"))
            },
        )
    }
}

/// The strongly connected components with more than one node (Tarjan).
fn circles(edges: &Edges) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
        graph.entry(to).or_default();
    }
    struct Tarjan<'a> {
        graph: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in graph.keys() {
        if !tarjan.index.contains_key(v) {
            tarjan.visit(v);
        }
    }
    tarjan.found.sort();
    tarjan.found
}

/// The circles, each with the edges inside it and where each is written.
fn describe(edges: &Edges) -> Option<String> {
    let found = circles(edges);
    if found.is_empty() {
        return None;
    }
    let mut text = String::new();
    for component in found {
        text.push_str(&format!("circle {{{}}}:\n", component.join(", ")));
        for ((from, to), evidence) in edges {
            if component.contains(from) && component.contains(to) {
                text.push_str(&format!("  {from} -> {to}  ({})\n", evidence[0]));
                for more in evidence.iter().skip(1).take(2) {
                    text.push_str(&format!("      also {more}\n"));
                }
            }
        }
    }
    Some(text)
}

fn graph_text(edges: &Edges) -> String {
    let mut by_source: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        by_source.entry(from).or_default().push(to);
    }
    by_source
        .iter()
        .map(|(from, to)| format!("{from} -> {}\n", to.join(", ")))
        .collect()
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let edges = scan().top_level();
    // `cargo test --test all architecture -- --nocapture` shows the graph.
    println!("{}", graph_text(&edges));
    if let Some(circles) = describe(&edges) {
        panic!("import circles between the library's top-level modules:\n{circles}");
    }
}

#[test]
fn no_import_circle_between_the_files_of_any_module() {
    let scan = scan();
    let tops: BTreeSet<String> = scan
        .file_modules
        .iter()
        .filter(|m| m.len() > 1)
        .map(|m| m[0].clone())
        .collect();
    let mut found = Vec::new();
    for top in tops {
        let edges = scan.files_of(&top);
        println!("{}", graph_text(&edges));
        if let Some(circles) = describe(&edges) {
            found.push(format!("src/{top}/:\n{circles}"));
        }
    }
    assert!(
        found.is_empty(),
        "import circles between the files of a module:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_import_circle_between_the_files_of_the_binarys_cli() {
    let scan = scan_binary();
    assert!(
        scan.file_modules
            .contains(&vec!["cli".to_string(), "run".to_string()]),
        "the binary's scan reads src/cli/"
    );
    let edges = scan.files_of("cli");
    // The binary's files are not all islands: a scan that found no edge read nothing.
    assert!(!edges.is_empty(), "no edge between the files of src/cli/");
    println!("{}", graph_text(&edges));
    if let Some(circles) = describe(&edges) {
        panic!("import circles between the files of src/cli/:\n{circles}");
    }
}

#[test]
fn the_scanner_sees_what_the_compiler_sees() {
    let text = blank_comments_and_literals(
        "use crate::a; // use crate::b;\nlet s = \"crate::c {\"; let r = r#\"crate::d\"#;\nlet c = '{'; fn f<'a>() {}\n/* crate::e */ crate::f::g();",
    );
    assert!(!text.contains("crate::b") && !text.contains("crate::c"));
    assert!(!text.contains("crate::d") && !text.contains("crate::e"));
    assert_eq!(text.lines().nth(2), Some("let c =    ; fn f<'a>() {}"));
    assert!(text.contains("crate::a") && text.contains("crate::f::g"));
    assert_eq!(text.lines().count(), 4);

    let items = expand_use_tree("a::{b, c::{self, D as E}, f::*, g as _}");
    let got: Vec<(String, Option<String>)> = items
        .iter()
        .map(|i| (i.segments.join("::"), i.binds.clone()))
        .collect();
    let want = [
        ("a::b", Some("b")),
        ("a::c", Some("c")),
        ("a::c::D", Some("E")),
        ("a::f::*", None),
        ("a::g", None),
    ];
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(p, b)| (p.to_string(), b.map(str::to_string)))
        .collect();
    assert_eq!(got, want);

    let module = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let modules: BTreeSet<_> = [module("agent"), module("agent::runtime")].into();
    let mut bindings = Bindings::new();
    bindings
        .entry(module("agent"))
        .or_default()
        .insert("RunError".to_string(), module("agent::runtime::RunError"));
    assert_eq!(
        resolve(&module("agent::RunError"), &modules, &bindings),
        module("agent::runtime::RunError")
    );
    assert_eq!(
        absolute(
            &module("agent::summarize"),
            &module("super::super::queue::X")
        ),
        Some(module("queue::X"))
    );
}

/// The functions of `src/agent/` longer than `max` lines (from `fn` to its closing brace, at
/// the indentation it opened with): the engine's core is kept in small steps.
fn long_functions(dir: &Path, max: usize) -> Vec<String> {
    let mut paths = Vec::new();
    collect(dir, &mut paths);
    let mut long = Vec::new();
    for path in paths {
        let text = fs::read_to_string(&path).expect("read source");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            let head = body
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .trim_start_matches("async ");
            if !head.starts_with("fn ") {
                continue;
            }
            // A declaration without a body (a trait's) ends with `;` before any `{`.
            let Some(open) = (i..lines.len()).find(|&k| {
                let l = lines[k].trim_end();
                l.ends_with('{') || l.ends_with(';')
            }) else {
                continue;
            };
            if lines[open].trim_end().ends_with(';') {
                continue;
            }
            let close = format!("{indent}}}");
            if let Some(end) = (open..lines.len()).find(|&k| lines[k] == close)
                && end - i + 1 > max
            {
                long.push(format!(
                    "{}:{} {} lines",
                    path.display(),
                    i + 1,
                    end - i + 1
                ));
            }
        }
    }
    long
}

#[test]
fn no_function_in_agent_is_over_80_lines() {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent");
    let long = long_functions(&agent, 80);
    assert!(long.is_empty(), "split these:\n{}", long.join("\n"));
    // The measure finds functions at all: some of agent/ are over 30 lines.
    assert!(!long_functions(&agent, 30).is_empty());
}
