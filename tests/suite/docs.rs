//! The documentation as users meet it (issue 43, item 10): README.md and AGENTS.md stay within
//! their sizes, and every relative link of README.md, AGENTS.md and `docs/*.md` reaches a file
//! that exists and, with `#anchor`, a heading of that page (GitHub's anchors: lower case, spaces
//! to hyphens, punctuation but `-` and `_` dropped, `-1`, `-2`… for repeated headings).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("AGENTS.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(page: &Path) -> HashSet<String> {
    let text = fs::read_to_string(page).expect("page");
    let mut seen: Vec<String> = Vec::new();
    let mut out = HashSet::new();
    for line in prose(&text) {
        if !line.starts_with('#') {
            continue;
        }
        let Some(heading) = line.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = seen.iter().filter(|s| **s == slug).count();
        out.insert(if repeats == 0 {
            slug.clone()
        } else {
            format!("{slug}-{repeats}")
        });
        seen.push(slug);
    }
    out
}

/// Every `](target)` of the page's prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn readme_and_agents_md_stay_within_their_sizes() {
    for (name, limit) in [("README.md", 12 * 1024), ("AGENTS.md", 10 * 1024)] {
        let size = fs::metadata(root().join(name)).expect(name).len();
        assert!(size <= limit, "{name} is {size} bytes, over {limit}");
    }
}

#[test]
fn every_relative_link_of_the_docs_reaches_a_file_and_its_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).expect("page");
        for link in links(&text) {
            if link.contains("://")
                || link.starts_with("mailto:")
                || link.contains(char::is_whitespace)
            {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("dir").join(file)
            };
            let name = page
                .strip_prefix(root())
                .expect("in the repository")
                .display();
            if !target.exists() {
                broken.push(format!("{name}: {link}: no such file"));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&target).contains(anchor)
            {
                broken.push(format!("{name}: {link}: no such heading"));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: the scan is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
