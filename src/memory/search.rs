//! Keyword search over the knowledge index: BM25 over lowercased, lightly stemmed English words
//! and Chinese character unigrams and bigrams (the bigrams carry most of the signal for Chinese
//! words without a dictionary), with topics and keywords weighted above the summary text.
//! Queries match Chinese words of two or more characters by bigrams only.

use std::collections::HashMap;

/// Words that carry no subject: question words and fillers, in both languages.
const STOP: &[&str] = &[
    "what",
    "did",
    "we",
    "do",
    "the",
    "a",
    "an",
    "in",
    "on",
    "of",
    "to",
    "and",
    "or",
    "is",
    "was",
    "were",
    "it",
    "about",
    "change",
    "changed",
    "happen",
    "happened",
    "discuss",
    "discussed",
    "work",
    "worked",
    "with",
    "for",
    "at",
    "our",
    "us",
    "you",
    "i",
    "any",
    "how",
    "which",
    "when",
    "that",
    "this",
    "there",
    "have",
    "has",
    "had",
    "show",
    "tell",
    "me",
    "remember",
    "previously",
    "我们",
    "什么",
    "了",
    "的",
    "吗",
    "呢",
    "做",
    "发生",
    "讨论",
    "聊",
    "哪些",
    "一下",
    "之前",
    "以前",
    "关于",
    "有",
    "在",
    "和",
    "是",
];

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FFFF)
}

/// A light English stemmer: one suffix off, then a final "e" off, so that "release",
/// "released" and "releases" all become "releas", and "queue"/"queues"/"queued" "queu".
fn stem(word: &str) -> String {
    let mut stem = word.to_string();
    for suffix in ["ations", "ation", "ings", "ing", "ies", "es", "ed", "s"] {
        if let Some(stripped) = word.strip_suffix(suffix)
            && stripped.chars().count() >= 3
        {
            stem = if suffix == "ies" {
                format!("{stripped}y")
            } else {
                stripped.to_string()
            };
            break;
        }
    }
    if stem.len() > 3 && stem.ends_with('e') {
        stem.pop();
    }
    stem
}

/// Whether a token is a CJK bigram (indexed for matching, not counted in a document's length:
/// Chinese would otherwise count each character twice and be penalised against English).
fn is_bigram(token: &str) -> bool {
    token.chars().count() == 2 && token.chars().all(is_cjk)
}

/// The search tokens of `text`: for a document, Chinese unigrams and bigrams.
pub fn tokens(text: &str) -> Vec<String> {
    tokenize(text, false)
}

/// The tokens of a query: a Chinese word of two or more characters matches by its bigrams only,
/// so that one shared character (限 of 上限 for 权限) is not a match.
pub fn query_tokens(text: &str) -> Vec<String> {
    tokenize(text, true)
}

fn tokenize(text: &str, query: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut run: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, out: &mut Vec<String>| {
        if !word.is_empty() {
            let w = word.to_lowercase();
            if !STOP.contains(&w.as_str()) {
                out.push(stem(&w));
            }
            word.clear();
        }
    };
    let flush_run = |run: &mut Vec<char>, out: &mut Vec<String>| {
        let chars: Vec<char> = std::mem::take(run);
        // Drop CJK stop words from the run before taking n-grams.
        let text: String = chars.iter().collect();
        let mut cleaned = text.clone();
        for stop in STOP.iter().filter(|s| s.chars().any(is_cjk)) {
            cleaned = cleaned.replace(stop, " ");
        }
        for piece in cleaned.split(' ').filter(|p| !p.is_empty()) {
            let cs: Vec<char> = piece.chars().collect();
            if !query || cs.len() == 1 {
                for c in &cs {
                    out.push(c.to_string());
                }
            }
            for pair in cs.windows(2) {
                out.push(pair.iter().collect());
            }
        }
    };
    for c in text.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            run.push(c);
        } else if c.is_alphanumeric() {
            flush_run(&mut run, &mut out);
            word.push(c);
        } else {
            flush_word(&mut word, &mut out);
            flush_run(&mut run, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_run(&mut run, &mut out);
    out
}

/// A document to rank: its weighted fields.
pub struct Doc<'a> {
    pub fields: Vec<(&'a str, f64)>,
}

/// BM25 scores of `docs` for `query` (0 for documents that match no query token).
pub fn bm25(query: &str, docs: &[Doc<'_>]) -> Vec<f64> {
    let q: Vec<String> = {
        let mut t = query_tokens(query);
        t.sort();
        t.dedup();
        t
    };
    if q.is_empty() || docs.is_empty() {
        return vec![0.0; docs.len()];
    }
    let (k1, b) = (1.2, 0.75);
    let tfs: Vec<HashMap<String, f64>> = docs
        .iter()
        .map(|d| {
            let mut tf = HashMap::new();
            for (text, weight) in &d.fields {
                for t in tokens(text) {
                    *tf.entry(t).or_insert(0.0) += weight;
                }
            }
            tf
        })
        .collect();
    let lens: Vec<f64> = tfs
        .iter()
        .map(|tf| {
            tf.iter()
                .filter(|(t, _)| !is_bigram(t))
                .map(|(_, w)| w)
                .sum()
        })
        .collect();
    let avg = lens.iter().sum::<f64>() / lens.len() as f64;
    let n = docs.len() as f64;
    tfs.iter()
        .zip(&lens)
        .map(|(tf, len)| {
            q.iter()
                .map(|t| {
                    let f = tf.get(t).copied().unwrap_or(0.0);
                    if f == 0.0 {
                        return 0.0;
                    }
                    let df = tfs.iter().filter(|d| d.contains_key(t)).count() as f64;
                    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                    idf * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_fold_case_stem_english_and_split_chinese() {
        assert_eq!(tokens("Permissions FIXED"), vec!["permission", "fix"]);
        assert_eq!(tokens("release released releases"), vec!["releas"; 3]);
        assert_eq!(tokens("queue queues queued"), vec!["queu"; 3]);
        assert_eq!(query_tokens("权限"), vec!["权限"]);
        let t = tokens("我们讨论了权限系统");
        assert!(
            t.contains(&"权限".to_string()) && t.contains(&"系统".to_string()),
            "{t:?}"
        );
        assert!(!t.iter().any(|x| x == "我们"), "{t:?}");
    }

    #[test]
    fn ranks_the_matching_document_first() {
        let docs = [
            Doc {
                fields: vec![("we fixed the sandbox for shell commands", 1.0)],
            },
            Doc {
                fields: vec![("权限文件的 extends 规则", 1.0), ("权限", 2.0)],
            },
            Doc {
                fields: vec![("release notes", 1.0)],
            },
        ];
        let s = bm25("权限", &docs);
        assert!(s[1] > s[0] && s[1] > s[2], "{s:?}");
        let s = bm25("Sandbox", &docs);
        assert!(s[0] > 0.0 && s[1] == 0.0, "{s:?}");
    }
}
