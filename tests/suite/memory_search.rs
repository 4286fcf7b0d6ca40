//! Memory search over a realistic knowledge index: six weeks of day summaries of this project,
//! in Chinese, English and both, for two agents. Every query runs against a fixed "today"
//! (Saturday 2026-11-21: yesterday is Friday the 20th, last week is Monday 9 – Sunday 15, this
//! month starts on the 1st); the wall clock is never read.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use nop::memory::{Hit, MemoryStore, SummaryOutput};

/// Saturday.
const TODAY: &str = "2026-11-21";

fn d(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
}

fn today() -> NaiveDate {
    d(TODAY)
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 21, 9, 0, 0)
        .single()
        .expect("now")
}

/// One day of the fixture: date, summary, topics, key points, keywords.
type Day = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const DEPENDENCY_AUDIT: &str = "Ran the weekly dependency audit: cargo audit reports no advisories; bumped two minor versions.";

/// The coder's days, oldest first (the store only removes the newest, so order matters).
const CODER: &[Day] = &[
    // Week of Oct 12.
    (
        "2026-10-12",
        "项目启动：搭建 Cargo 工作区，确定模块划分（protocol、session、tools），写了第一版 README。",
        &["项目结构", "工作区"],
        &["三个模块各自一个目录", "README 说明构建方式"],
        &["cargo", "工作区", "模块划分"],
    ),
    (
        "2026-10-13",
        "设计权限系统：权限文件 permissions.toml 定义 allow、deny、ask 三种决策，按工具名和路径匹配规则，权限默认为询问。",
        &["权限系统"],
        &["deny 优先于 allow", "没有匹配规则时询问用户"],
        &["权限", "权限文件", "permissions.toml"],
    ),
    (
        "2026-10-14",
        "Implemented the permission rule matcher: glob patterns for paths, deny takes precedence over allow, unit tests for every rule kind.",
        &["permissions"],
        &["globset compiles all patterns once", "deny wins over allow"],
        &["permission rules", "glob", "matcher"],
    ),
    (
        "2026-10-15",
        "实现配置文件解析器：TOML 解析、字段校验，错误信息带行号和列号。",
        &["解析器", "配置"],
        &["未知字段报错而不是忽略"],
        &["解析器", "toml", "行号"],
    ),
    (
        "2026-10-16",
        "Set up CI on GitHub Actions: cargo fmt check, clippy with -D warnings, tests on Linux and macOS runners.",
        &["CI"],
        &["the workflow runs on every pull request"],
        &["github actions", "clippy", "ci"],
    ),
    // Week of Oct 19.
    (
        "2026-10-19",
        "Prototyped the sandbox for shell commands with Linux namespaces: commands see a read-only root and a writable workspace.",
        &["sandbox"],
        &[
            "bubblewrap was rejected as an external dependency",
            "landlock restricts file access",
        ],
        &["sandbox", "namespaces", "landlock"],
    ),
    (
        "2026-10-20",
        "沙箱网络隔离：默认禁止网络访问，只放行配置中列出的域名；macOS 上改用 sandbox-exec。",
        &["沙箱", "网络隔离"],
        &["DNS 也走白名单"],
        &["沙箱", "sandbox", "网络"],
    ),
    (
        "2026-10-21",
        DEPENDENCY_AUDIT,
        &["dependencies"],
        &[],
        &["dependency audit", "cargo audit"],
    ),
    (
        "2026-10-22",
        "实现消息队列：代理运行时用户输入的消息进入队列，按顺序在下一轮投递。",
        &["消息队列"],
        &["队列中的消息可以撤回"],
        &["消息队列", "queue"],
    ),
    (
        "2026-10-23",
        "Fixed a bug in the SSE stream parser: events split across network chunks were dropped; added a regression test with a chunk boundary inside a UTF-8 character.",
        &["parser", "streaming"],
        &["the parser buffers incomplete lines"],
        &["sse", "parser", "bug", "utf-8"],
    ),
    (
        "2026-10-24",
        "Documentation day: wrote the user guide for sessions and the configuration reference.",
        &["docs"],
        &[],
        &["documentation", "user guide"],
    ),
    // Week of Oct 26.
    (
        "2026-10-26",
        "上下文压缩第一版：接近上下文窗口上限时，把旧消息总结成一段摘要替换掉。",
        &["上下文压缩", "compaction"],
        &["摘要由模型生成"],
        &["压缩", "compaction", "上下文窗口"],
    ),
    (
        "2026-10-27",
        "Tuned compaction thresholds: compact at 80% of the context window, keep the last ten messages verbatim, never compact in the middle of a turn.",
        &["compaction"],
        &["thresholds are configurable"],
        &["compaction", "context window", "threshold"],
    ),
    (
        "2026-10-28",
        "准备 v0.1.0 发布：编写 CHANGELOG，配置 cargo-dist 生成多平台二进制。",
        &["发布"],
        &["发布前冻结功能"],
        &["发布", "v0.1.0", "release", "changelog"],
    ),
    (
        "2026-10-29",
        "Released v0.1.0: tagged the release, published binaries for Linux and macOS and wrote the release notes.",
        &["release"],
        &["Windows builds postponed"],
        &["release", "v0.1.0", "binaries"],
    ),
    (
        "2026-10-30",
        "修复会话恢复的 bug：崩溃后重启时丢失最后一条助手消息，改为每条消息落盘后再确认。",
        &["bug 修复", "会话"],
        &["会话文件原子写入"],
        &["bug", "会话恢复", "崩溃"],
    ),
    // Week of Nov 2.
    (
        "2026-11-02",
        "Queue improvements: persisted the message queue to disk so queued messages survive a restart; added a queue length limit.",
        &["queue"],
        &["the queue file is JSONL"],
        &["message queue", "persistence"],
    ),
    (
        "2026-11-03",
        "修复工具调用参数 JSON 解析器的 bug：模型输出带尾随逗号或被截断时解析失败，现在容错处理并给出清楚的错误。",
        &["解析器", "工具调用"],
        &["截断的 JSON 不再导致崩溃"],
        &["解析器", "json", "bug"],
    ),
    (
        "2026-11-04",
        DEPENDENCY_AUDIT,
        &["dependencies"],
        &[],
        &["dependency audit", "cargo audit"],
    ),
    (
        "2026-11-05",
        "CI was flaky: sandbox tests timed out on macOS runners; moved them to a separate job with a longer timeout and cached the cargo registry.",
        &["CI", "flaky tests"],
        &["macOS runners are slower"],
        &["ci", "flaky", "cache"],
    ),
    (
        "2026-11-06",
        "沙箱逃逸问题：符号链接可以指向工作区之外，改为在沙箱内解析真实路径后再检查。",
        &["沙箱", "安全"],
        &["所有路径先 canonicalize"],
        &["沙箱", "符号链接", "sandbox"],
    ),
    // Week of Nov 9 ("last week").
    (
        "2026-11-09",
        "权限系统支持 extends 继承：项目权限文件可以继承用户级默认权限配置，冲突时以项目为准。",
        &["权限系统"],
        &["继承链最多三层"],
        &["权限", "extends", "继承"],
    ),
    (
        "2026-11-10",
        "Parser work: the markdown parser for assistant replies now handles nested code fences; fixed a bug where a fence inside a list item ended the block early.",
        &["parser", "markdown"],
        &["fences are matched by length"],
        &["markdown parser", "code fence", "bug"],
    ),
    (
        "2026-11-11",
        "权限提示改进：询问用户时显示完整命令和匹配到的规则，新增“本次会话始终允许”选项。",
        &["权限", "交互"],
        &["始终允许只在当前会话有效"],
        &["权限提示", "始终允许"],
    ),
    (
        "2026-11-12",
        "Sandboxing on macOS: generated seatbelt profiles so that only the workspace is writable inside the sandbox.",
        &["sandbox", "macOS"],
        &["profiles are cached per workspace"],
        &["seatbelt", "sandbox", "沙箱"],
    ),
    (
        "2026-11-13",
        "修复压缩后工具调用与结果不配对的 bug：压缩时把成对的消息一起保留。",
        &["上下文压缩", "bug 修复"],
        &["工具调用和结果必须成对"],
        &["压缩", "compaction", "bug"],
    ),
    (
        "2026-11-14",
        "修复 CI 中新版 clippy 报出的警告，升级 Rust 工具链到 1.90。",
        &["CI", "工具链"],
        &[],
        &["clippy", "ci", "工具链"],
    ),
    // Week of Nov 16 ("this week").
    (
        "2026-11-16",
        "Permission audit log: every allow or deny decision is appended to a JSONL audit file with the rule that matched.",
        &["permissions", "audit"],
        &["the audit file rotates at 10 MB"],
        &["permissions", "audit log", "权限"],
    ),
    (
        "2026-11-17",
        "消息队列并发问题：两个终端同时写队列时丢消息，改为文件锁加原子写入。",
        &["消息队列", "并发"],
        &["锁超时十秒"],
        &["队列", "文件锁", "queue"],
    ),
    (
        "2026-11-18",
        "发布 v0.2.0：新增 macOS 沙箱和权限审计日志，更新了安装脚本。",
        &["发布"],
        &["安装脚本校验 checksum"],
        &["发布", "v0.2.0", "release"],
    ),
    (
        "2026-11-19",
        "Release pipeline in CI: tags now trigger cargo-dist builds and upload checksums; fixed the Windows build.",
        &["release", "CI"],
        &["Windows binaries are back"],
        &["release pipeline", "cargo-dist", "checksums"],
    ),
    (
        "2026-11-20",
        "Fixed a bug in the permission matcher: paths containing '..' escaped the workspace rule; paths are now normalized before matching.",
        &["permissions", "bug fix"],
        &["normalization happens before glob matching"],
        &["path normalization", "bug", "permissions"],
    ),
];

/// The reviewer's days, oldest first.
const REVIEWER: &[Day] = &[
    (
        "2026-10-29",
        "审查 v0.1.0 发布清单，确认 CHANGELOG 完整、二进制可以下载。",
        &["代码审查", "发布"],
        &[],
        &["审查", "发布"],
    ),
    (
        "2026-11-10",
        "Reviewed the markdown parser pull request: asked for tests of nested fences, approved after the fix.",
        &["code review", "parser"],
        &[],
        &["code review", "parser"],
    ),
    (
        "2026-11-17",
        "审查消息队列并发修复，建议增加多进程压力测试。",
        &["代码审查", "消息队列"],
        &[],
        &["审查", "队列"],
    ),
    (
        "2026-11-20",
        "Reviewed the permission matcher fix for '..' paths; suggested a property test for path normalization.",
        &["code review", "permissions"],
        &[],
        &["code review", "path normalization"],
    ),
];

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A memory store in a temporary `.nop` holding the whole fixture.
fn fixture() -> (tempfile::TempDir, MemoryStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MemoryStore::new(dir.path());
    for (agent, days) in [("coder", CODER), ("reviewer", REVIEWER)] {
        for (i, (date, summary, topics, key_points, keywords)) in days.iter().enumerate() {
            let output = SummaryOutput {
                summary: summary.to_string(),
                topics: owned(topics),
                key_points: owned(key_points),
                keywords: owned(keywords),
            };
            let created = now() - chrono::Duration::days(days.len() as i64 - i as i64);
            store
                .append(
                    agent,
                    "You are the project's agent.",
                    d(date),
                    output,
                    (20 + i, 6),
                    created,
                )
                .expect("append");
        }
    }
    (dir, store)
}

fn search(store: &MemoryStore, agent: Option<&str>, query: &str) -> Vec<Hit> {
    store.search(agent, query, today()).expect("search")
}

/// The coder's hits as dates, in order.
fn coder_dates(store: &MemoryStore, query: &str) -> Vec<String> {
    search(store, Some("coder"), query)
        .iter()
        .map(|h| h.entry.date.to_string())
        .collect()
}

/// Hits as "agent date", in order.
fn labels(hits: &[Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| format!("{} {}", h.agent, h.entry.date))
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn strings(items: &[&str]) -> Vec<String> {
    owned(items)
}

fn score_of(hits: &[Hit], agent: &str, date: &str) -> f64 {
    hits.iter()
        .find(|h| h.agent == agent && h.entry.date == d(date))
        .map(|h| h.score)
        .unwrap_or_else(|| panic!("{agent} {date} not in {:?}", labels(hits)))
}

/// Every entry of `dates` (the coder's) is absent from `hits`.
fn assert_absent(hits: &[Hit], dates: &[&str], query: &str) {
    for date in dates {
        assert!(
            !hits
                .iter()
                .any(|h| h.agent == "coder" && h.entry.date == d(date)),
            "{query:?}: irrelevant coder {date} returned in {:?}",
            labels(hits)
        );
    }
}

/// Days of the coder that have nothing to do with permissions, sandboxing, parsing or releases.
const QUEUE_DAYS: &[&str] = &["2026-10-22", "2026-11-02", "2026-11-17"];
const CI_DAYS: &[&str] = &["2026-10-16", "2026-11-05", "2026-11-14"];
const AUDIT_DAYS: &[&str] = &["2026-10-21", "2026-11-04"];

#[test]
fn the_fixture_is_six_weeks_of_two_agents() {
    assert!(CODER.len() >= 30, "{}", CODER.len());
    let first = d(CODER[0].0);
    let last = d(CODER[CODER.len() - 1].0);
    assert!((last - first).num_days() >= 35, "{first}..{last}");
    let (_dir, store) = fixture();
    assert_eq!(store.agents(), strings(&["coder", "reviewer"]));
    assert_eq!(
        store
            .load("coder")
            .expect("load")
            .expect("coder")
            .entries
            .len(),
        CODER.len()
    );
}

#[test]
fn a_chinese_keyword_ranks_the_permission_days_first() {
    let (_dir, store) = fixture();
    let hits = search(&store, Some("coder"), "权限");
    let dates: Vec<String> = hits.iter().map(|h| h.entry.date.to_string()).collect();
    // The design day: 权限 in the summary three times, in the topic and in two keywords.
    assert_eq!(dates[0], "2026-10-13", "{dates:?}");
    // The permission days (Chinese, and the English one with the bilingual keyword 权限)...
    assert_eq!(
        sorted(dates[..4].to_vec()),
        strings(&["2026-10-13", "2026-11-09", "2026-11-11", "2026-11-16"])
    );
    // ... then the release whose notes mention the permission audit log.
    assert_eq!(dates[4], "2026-11-18", "{dates:?}");
    // Anything else (a single shared character, like 限 of 上限) ranks below all of them.
    let weakest_relevant = hits[..5]
        .iter()
        .map(|h| h.score)
        .fold(f64::INFINITY, f64::min);
    assert!(
        hits[5..].iter().all(|h| h.score < weakest_relevant / 2.0),
        "{dates:?}"
    );
    assert_absent(
        &hits,
        &["2026-10-19", "2026-10-20", "2026-11-06", "2026-11-12"],
        "权限",
    );
    assert_absent(
        &hits,
        &["2026-10-15", "2026-10-23", "2026-11-03", "2026-11-10"],
        "权限",
    );
    assert_absent(&hits, QUEUE_DAYS, "权限");
    assert_absent(&hits, CI_DAYS, "权限");
    assert_absent(&hits, &["2026-10-28", "2026-10-29", "2026-11-19"], "权限");
}

#[test]
fn a_date_expression_and_a_keyword_combine() {
    let (_dir, store) = fixture();
    // Last week (Nov 9–15) has two permission days; Oct 13 and Nov 16 are outside it, and the
    // other days of last week (parser, sandbox, compaction, CI) are not about permissions.
    assert_eq!(
        coder_dates(&store, "上周 权限"),
        strings(&["2026-11-09", "2026-11-11"])
    );
    assert_eq!(
        labels(&search(&store, None, "上周 权限")),
        strings(&["coder 2026-11-09", "coder 2026-11-11"])
    );
    assert_eq!(
        coder_dates(&store, "上周的权限讨论"),
        strings(&["2026-11-09", "2026-11-11"])
    );
    // 上上周 (Nov 2–8) has none.
    assert!(coder_dates(&store, "上上周 权限").is_empty());
}

#[test]
fn english_keywords_are_case_folded_and_stemmed() {
    let (_dir, store) = fixture();
    let hits = search(&store, None, "sandbox");
    let dates: Vec<String> = hits.iter().map(|h| h.entry.date.to_string()).collect();
    assert_eq!(dates[0], "2026-11-12", "{dates:?}");
    // The three days spent on the sandbox with English words for it come first.
    assert_eq!(
        sorted(dates[..3].to_vec()),
        strings(&["2026-10-19", "2026-10-20", "2026-11-12"])
    );
    // Then the Chinese sandbox-escape day (keyword "sandbox") and the CI day about sandbox tests.
    assert_eq!(
        sorted(dates[3..].to_vec()),
        strings(&["2026-11-05", "2026-11-06"])
    );
    assert!(hits.iter().all(|h| h.agent == "coder"));
    let key = |hits: Vec<Hit>| {
        hits.into_iter()
            .map(|h| (h.agent, h.id, h.score))
            .collect::<Vec<_>>()
    };
    for variant in ["Sandboxing", "SANDBOX", "sandboxed", "Sandboxes"] {
        assert_eq!(
            key(search(&store, None, variant)),
            key(hits.clone()),
            "{variant}"
        );
    }
    // "Permissions" finds the English permission days and the bilingual design day.
    let permissions = coder_dates(&store, "Permissions");
    assert_eq!(
        sorted(permissions.clone()),
        strings(&["2026-10-13", "2026-10-14", "2026-11-16", "2026-11-20"]),
        "{permissions:?}"
    );
}

#[test]
fn a_chinese_word_and_an_english_word_together() {
    let (_dir, store) = fixture();
    let hits = search(&store, Some("coder"), "解析器 bug");
    let dates: Vec<String> = hits.iter().map(|h| h.entry.date.to_string()).collect();
    // The JSON parser bug fix has both words; the config parser day only 解析器.
    assert_eq!(dates[..2].to_vec(), strings(&["2026-11-03", "2026-10-15"]));
    // Days matching one word only (other bug fixes, 解析 in the sandbox day) come well below.
    let second = hits[1].score;
    assert!(
        hits[2..].iter().all(|h| h.score < second / 2.0),
        "{dates:?}"
    );
    assert_absent(&hits, QUEUE_DAYS, "解析器 bug");
    assert_absent(&hits, CI_DAYS, "解析器 bug");
    assert_absent(&hits, AUDIT_DAYS, "解析器 bug");
    assert_absent(
        &hits,
        &[
            "2026-10-24",
            "2026-10-28",
            "2026-10-29",
            "2026-11-19",
            "2026-11-09",
            "2026-11-11",
        ],
        "解析器 bug",
    );
}

#[test]
fn an_english_question_with_a_date_and_stop_words() {
    let (_dir, store) = fixture();
    let q = "what did we change in the parser last week?";
    assert_eq!(coder_dates(&store, q), strings(&["2026-11-10"]));
    assert_eq!(
        sorted(labels(&search(&store, None, q))),
        strings(&["coder 2026-11-10", "reviewer 2026-11-10"])
    );
    // Without the date, the older SSE parser fix comes too; nothing else does.
    assert_eq!(
        sorted(coder_dates(&store, "what did we change in the parser?")),
        strings(&["2026-10-23", "2026-11-10"])
    );
    // Stop words alone are no query at all.
    assert!(search(&store, None, "what did we do?").is_empty());
    assert!(search(&store, None, "我们之前做了什么").is_empty());
}

#[test]
fn a_date_alone_returns_the_whole_day_newest_first() {
    let (_dir, store) = fixture();
    assert_eq!(coder_dates(&store, "昨天"), strings(&["2026-11-20"]));
    assert_eq!(coder_dates(&store, "yesterday"), strings(&["2026-11-20"]));
    let both = search(&store, None, "昨天");
    assert_eq!(
        sorted(labels(&both)),
        strings(&["coder 2026-11-20", "reviewer 2026-11-20"])
    );
    assert!(both.iter().all(|h| h.score == 0.0));
    assert_eq!(coder_dates(&store, "前天"), strings(&["2026-11-19"]));
    // Today (Saturday) nobody worked.
    assert!(search(&store, None, "今天").is_empty());
}

#[test]
fn the_last_seven_days_newest_first() {
    let (_dir, store) = fixture();
    let want = strings(&[
        "2026-11-20",
        "2026-11-19",
        "2026-11-18",
        "2026-11-17",
        "2026-11-16",
    ]);
    assert_eq!(coder_dates(&store, "最近7天"), want);
    assert_eq!(coder_dates(&store, "最近七天"), want);
    assert_eq!(coder_dates(&store, "last 7 days"), want);
    let all = search(&store, None, "最近7天");
    assert_eq!(all.len(), 7, "{:?}", labels(&all));
    assert!(
        all.windows(2).all(|w| w[0].entry.date >= w[1].entry.date),
        "{:?}",
        labels(&all)
    );
}

#[test]
fn iso_dates_and_ranges() {
    let (_dir, store) = fixture();
    assert_eq!(
        coder_dates(&store, "2026-11-03..2026-11-05"),
        strings(&["2026-11-05", "2026-11-04", "2026-11-03"])
    );
    assert_eq!(
        coder_dates(&store, "2026-11-05 to 2026-11-03"),
        strings(&["2026-11-05", "2026-11-04", "2026-11-03"])
    );
    assert_eq!(coder_dates(&store, "2026-11-04"), strings(&["2026-11-04"]));
    // A range with a keyword: only that week's sandbox days.
    assert_eq!(
        sorted(coder_dates(&store, "2026-11-02..2026-11-08 sandbox")),
        strings(&["2026-11-05", "2026-11-06"])
    );
}

#[test]
fn this_month_and_last_month_releases() {
    let (_dir, store) = fixture();
    // November: the release pipeline day (release in the summary, topic and keyword) and the
    // v0.2.0 release (keyword); October's v0.1.0 days are out of range.
    assert_eq!(
        coder_dates(&store, "this month release"),
        strings(&["2026-11-19", "2026-11-18"])
    );
    assert_eq!(
        sorted(coder_dates(&store, "last month release")),
        strings(&["2026-10-28", "2026-10-29"])
    );
    assert_eq!(coder_dates(&store, "上个月 发布"), strings(&["2026-10-28"]));
    assert_eq!(
        sorted(labels(&search(&store, None, "上个月 发布"))),
        strings(&["coder 2026-10-28", "reviewer 2026-10-29"])
    );
    // 这个月 发布: the v0.2.0 release first; the concurrency day shares only 发 (of 并发), a
    // character unigram, and ranks far below.
    let hits = search(&store, Some("coder"), "这个月 发布");
    assert_eq!(hits[0].entry.date, d("2026-11-18"), "{:?}", labels(&hits));
    assert!(
        hits[1..].iter().all(|h| h.score < hits[0].score / 2.0),
        "{:?}",
        labels(&hits)
    );
}

#[test]
fn the_agent_filter() {
    let (_dir, store) = fixture();
    assert_eq!(
        labels(&search(&store, Some("reviewer"), "parser")),
        strings(&["reviewer 2026-11-10"])
    );
    let all = search(&store, None, "parser");
    assert_eq!(
        sorted(labels(&all)),
        strings(&[
            "coder 2026-10-23",
            "coder 2026-11-10",
            "reviewer 2026-11-10"
        ])
    );
    assert!(
        search(&store, Some("coder"), "parser")
            .iter()
            .all(|h| h.agent == "coder")
    );
    // Over all agents the reviewer's entry is ranked like any other.
    assert!(score_of(&all, "reviewer", "2026-11-10") > 0.0);
    assert_eq!(
        labels(&search(&store, Some("reviewer"), "消息队列")),
        strings(&["reviewer 2026-11-17"])
    );
    assert!(search(&store, Some("reviewer"), "sandbox").is_empty());
    assert!(search(&store, Some("nobody"), "parser").is_empty());
}

#[test]
fn ties_are_ordered_newest_first() {
    let (_dir, store) = fixture();
    let hits = search(&store, None, "dependency audit");
    assert_eq!(
        labels(&hits[..2]),
        strings(&["coder 2026-11-04", "coder 2026-10-21"])
    );
    assert_eq!(hits[0].score, hits[1].score);
    assert!(hits[2..].iter().all(|h| h.score < hits[1].score));
}

#[test]
fn bilingual_keywords_bridge_the_languages() {
    let (_dir, store) = fixture();
    let hits = coder_dates(&store, "compaction");
    assert_eq!(hits[0], "2026-10-27", "{hits:?}");
    assert_eq!(
        sorted(hits),
        strings(&["2026-10-26", "2026-10-27", "2026-11-13"])
    );
    let hits = coder_dates(&store, "压缩");
    assert_eq!(sorted(hits), strings(&["2026-10-26", "2026-11-13"]));
    let hits = coder_dates(&store, "消息队列");
    assert_eq!(hits[..2].to_vec(), strings(&["2026-10-22", "2026-11-17"]));
}

#[test]
fn removed_entries_are_never_returned() {
    let (_dir, store) = fixture();
    let before = search(&store, None, "normalization");
    assert_eq!(
        sorted(labels(&before)),
        strings(&["coder 2026-11-20", "reviewer 2026-11-20"])
    );
    let popped = store
        .pop("coder", None, "tester", now())
        .expect("pop")
        .entry;
    assert_eq!(popped.summary_date, d("2026-11-20"));
    // The reviewer's entry of the same day stays; the coder's is gone from every kind of query.
    assert_eq!(
        labels(&search(&store, None, "normalization")),
        strings(&["reviewer 2026-11-20"])
    );
    assert!(coder_dates(&store, "昨天").is_empty());
    assert!(!coder_dates(&store, "permissions").contains(&"2026-11-20".to_string()));
    assert_eq!(coder_dates(&store, "最近7天")[0], "2026-11-19");
    let restored = store.restore("coder").expect("restore");
    assert_eq!(restored.id, popped.id);
    assert_eq!(
        sorted(labels(&search(&store, None, "normalization"))),
        strings(&["coder 2026-11-20", "reviewer 2026-11-20"])
    );
    assert_eq!(coder_dates(&store, "昨天"), strings(&["2026-11-20"]));
}

/// Inflected forms find the base form: "released"/"release", "queues"/"queue".
#[test]
fn inflected_forms_find_the_base_form() {
    let (_dir, store) = fixture();
    // The v0.2.0 release (keyword "release") and the release pipeline day ("Release").
    assert_eq!(
        sorted(coder_dates(&store, "what was released this month?")),
        strings(&["2026-11-18", "2026-11-19"])
    );
    // Every day with the keyword "queue" or "message queue" comes first; a day that only
    // mentions "messages" matches more weakly, after them.
    let hits = coder_dates(&store, "message queues");
    assert_eq!(
        sorted(hits[..3].to_vec()),
        strings(&["2026-10-22", "2026-11-02", "2026-11-17"]),
        "{hits:?}"
    );
    assert!(hits[3..].iter().all(|d| d == "2026-10-27"), "{hits:?}");
}

/// The Chinese sandbox-escape day has "sandbox" as a keyword (weight 2) and 沙箱 as a topic; the
/// CI day mentions sandbox tests once in its summary. Length normalisation counts each Chinese
/// character twice (unigram and bigram), so the Chinese entry is ~3x the average English length.
#[test]

fn a_sandbox_day_outranks_a_passing_mention() {
    let (_dir, store) = fixture();
    let hits = search(&store, Some("coder"), "sandbox");
    assert!(
        score_of(&hits, "coder", "2026-11-06") > score_of(&hits, "coder", "2026-11-05"),
        "{:?}",
        hits.iter()
            .map(|h| (h.entry.date.to_string(), h.score))
            .collect::<Vec<_>>()
    );
}
