//! Date expressions in questions, Chinese and English (seed 001 §2.3.3), against an injected
//! "today": 今天 昨天 前天 上周 上上周 本周 最近N天 这个月 上个月, today, yesterday, the day before
//! yesterday, last week, this week, last N days, this month, last month, ISO dates and ranges.
//! Weeks start on Monday.

use chrono::{Datelike, Duration, NaiveDate};

/// An inclusive range of days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateRange {
    pub from: NaiveDate,
    pub to: NaiveDate,
}

impl DateRange {
    fn day(d: NaiveDate) -> DateRange {
        DateRange { from: d, to: d }
    }

    pub fn contains(&self, d: NaiveDate) -> bool {
        self.from <= d && d <= self.to
    }
}

/// The expressions [`parse`] looks for, compiled once per process (every prompt is asked
/// whether it is about the past).
struct Patterns {
    iso_range: Option<regex::Regex>,
    iso_day: Option<regex::Regex>,
    last_days: Option<regex::Regex>,
}

fn patterns() -> &'static Patterns {
    static PATTERNS: std::sync::OnceLock<Patterns> = std::sync::OnceLock::new();
    PATTERNS.get_or_init(|| {
        // Fixed patterns, checked by the tests: one that failed to compile would only leave
        // its form unrecognised.
        let compile = |pattern: &str| regex::Regex::new(pattern).ok();
        Patterns {
            iso_range: compile(
                r"([0-9]{4}-[0-9]{2}-[0-9]{2})\s*(?:\.\.|~|to|至|到|—|–)\s*([0-9]{4}-[0-9]{2}-[0-9]{2})",
            ),
            iso_day: compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),
            last_days: compile(
                r"(?i)(?:最近|过去)\s*([0-9]+|[一二三四五六七八九十两]+)\s*天|(?:last|past)\s+([0-9]+)\s+days?",
            ),
        }
    })
}

/// The date ranges a query names, and the query with those expressions removed.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
pub fn parse(query: &str, today: NaiveDate) -> (Vec<DateRange>, String) {
    let mut ranges = Vec::new();
    let mut rest = query.to_string();
    let monday = today - Duration::days(i64::from(today.weekday().num_days_from_monday()));
    let week = |start: NaiveDate| DateRange {
        from: start,
        to: start + Duration::days(6),
    };
    let month_start = today.with_day(1).unwrap_or(today);
    let prev_month_end = month_start - Duration::days(1);
    let prev_month = DateRange {
        from: prev_month_end.with_day(1).unwrap_or(prev_month_end),
        to: prev_month_end,
    };

    // ISO ranges first, then ISO days, so a range is not read as two days. The expressions are
    // compiled the first time a query could hold one (most prompts hold neither).
    let has_digit = query.bytes().any(|b| b.is_ascii_digit());
    let iso: [(Option<&regex::Regex>, bool); 2] = if has_digit {
        [
            (patterns().iso_range.as_ref(), true),
            (patterns().iso_day.as_ref(), false),
        ]
    } else {
        [(None, true), (None, false)]
    };
    for (re, is_range) in iso {
        let Some(re) = re else { continue };
        let mut found = Vec::new();
        for caps in re.captures_iter(&rest) {
            let whole = caps
                .get(0)
                .map(|m| m.as_str().to_string())
                .unwrap_or_default();
            let parse = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
            let range = if is_range {
                match (
                    caps.get(1).and_then(|m| parse(m.as_str())),
                    caps.get(2).and_then(|m| parse(m.as_str())),
                ) {
                    (Some(a), Some(b)) => Some(DateRange {
                        from: a.min(b),
                        to: a.max(b),
                    }),
                    _ => None,
                }
            } else {
                parse(&whole).map(DateRange::day)
            };
            if let Some(r) = range {
                ranges.push(r);
                found.push(whole);
            }
        }
        for f in found {
            rest = rest.replacen(&f, " ", 1);
        }
    }

    // "最近7天", "最近七天", "last 7 days", "past 3 days".
    let lowered = rest.to_lowercase();
    let may_count_days = ["最近", "过去", "last", "past"]
        .iter()
        .any(|w| lowered.contains(w));
    if let Some(re) = may_count_days
        .then(|| patterns().last_days.as_ref())
        .flatten()
    {
        let mut found = Vec::new();
        for caps in re.captures_iter(&rest) {
            let n = caps
                .get(1)
                .and_then(|m| chinese_number(m.as_str()))
                .or_else(|| caps.get(2).and_then(|m| m.as_str().parse().ok()));
            if let Some(n) = n.filter(|n: &i64| *n > 0) {
                ranges.push(DateRange {
                    from: today - Duration::days(n - 1),
                    to: today,
                });
                found.push(
                    caps.get(0)
                        .map(|m| m.as_str().to_string())
                        .unwrap_or_default(),
                );
            }
        }
        for f in found {
            rest = rest.replacen(&f, " ", 1);
        }
    }

    // Longest phrases first so that 上上周 is not read as 上周, nor "the day before yesterday"
    // as "yesterday".
    let phrases: Vec<(&str, DateRange)> = vec![
        (
            "the day before yesterday",
            DateRange::day(today - Duration::days(2)),
        ),
        ("上上周", week(monday - Duration::days(14))),
        ("上个月", prev_month),
        ("last month", prev_month),
        (
            "这个月",
            DateRange {
                from: month_start,
                to: today,
            },
        ),
        (
            "本月",
            DateRange {
                from: month_start,
                to: today,
            },
        ),
        (
            "this month",
            DateRange {
                from: month_start,
                to: today,
            },
        ),
        ("上周", week(monday - Duration::days(7))),
        ("上星期", week(monday - Duration::days(7))),
        ("last week", week(monday - Duration::days(7))),
        (
            "本周",
            DateRange {
                from: monday,
                to: today,
            },
        ),
        (
            "这周",
            DateRange {
                from: monday,
                to: today,
            },
        ),
        (
            "这星期",
            DateRange {
                from: monday,
                to: today,
            },
        ),
        (
            "this week",
            DateRange {
                from: monday,
                to: today,
            },
        ),
        ("前天", DateRange::day(today - Duration::days(2))),
        ("昨天", DateRange::day(today - Duration::days(1))),
        ("yesterday", DateRange::day(today - Duration::days(1))),
        ("今天", DateRange::day(today)),
        ("today", DateRange::day(today)),
    ];
    let mut lower = rest.to_lowercase();
    for (phrase, range) in phrases {
        while let Some(i) = lower.find(phrase) {
            ranges.push(range);
            lower.replace_range(i..i + phrase.len(), &" ".repeat(phrase.len()));
        }
    }
    (ranges, lower)
}

fn chinese_number(s: &str) -> Option<i64> {
    if let Ok(n) = s.parse() {
        return Some(n);
    }
    let digit = |c: char| {
        "零一二三四五六七八九"
            .chars()
            .position(|d| d == c)
            .map(|p| p as i64)
            .or((c == '两').then_some(2))
    };
    let chars: Vec<char> = s.chars().collect();
    match chars.as_slice() {
        [c] if *c == '十' => Some(10),
        [c] => digit(*c),
        ['十', b] => Some(10 + digit(*b)?),
        [a, '十'] => Some(digit(*a)? * 10),
        [a, '十', b] => Some(digit(*a)? * 10 + digit(*b)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        let p = patterns();
        assert!(p.iso_range.is_some() && p.iso_day.is_some() && p.last_days.is_some());
    }

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
    }

    fn ranges(q: &str, today: &str) -> Vec<(String, String)> {
        parse(q, d(today))
            .0
            .into_iter()
            .map(|r| (r.from.to_string(), r.to.to_string()))
            .collect()
    }

    fn one(from: &str, to: &str) -> Vec<(String, String)> {
        vec![(from.to_string(), to.to_string())]
    }

    /// Sunday 2026-11-22: weeks start on Monday the 16th.
    const TODAY: &str = "2026-11-22";

    #[test]
    fn chinese_expressions() {
        assert_eq!(
            ranges("今天做了什么", TODAY),
            one("2026-11-22", "2026-11-22")
        );
        assert_eq!(
            ranges("昨天我们做了什么", TODAY),
            one("2026-11-21", "2026-11-21")
        );
        assert_eq!(ranges("前天", TODAY), one("2026-11-20", "2026-11-20"));
        assert_eq!(
            ranges("上周讨论了什么", TODAY),
            one("2026-11-09", "2026-11-15")
        );
        assert_eq!(ranges("上上周", TODAY), one("2026-11-02", "2026-11-08"));
        assert_eq!(ranges("本周", TODAY), one("2026-11-16", "2026-11-22"));
        assert_eq!(ranges("最近7天", TODAY), one("2026-11-16", "2026-11-22"));
        assert_eq!(
            ranges("最近三天的权限改动", TODAY),
            one("2026-11-20", "2026-11-22")
        );
        assert_eq!(ranges("最近十五天", TODAY), one("2026-11-08", "2026-11-22"));
        assert_eq!(ranges("这个月", TODAY), one("2026-11-01", "2026-11-22"));
        assert_eq!(ranges("上个月", TODAY), one("2026-10-01", "2026-10-31"));
    }

    #[test]
    fn english_expressions_and_iso_dates() {
        assert_eq!(
            ranges("what did we change yesterday?", TODAY),
            one("2026-11-21", "2026-11-21")
        );
        assert_eq!(
            ranges("The day before yesterday", TODAY),
            one("2026-11-20", "2026-11-20")
        );
        assert_eq!(ranges("last week", TODAY), one("2026-11-09", "2026-11-15"));
        assert_eq!(ranges("this week", TODAY), one("2026-11-16", "2026-11-22"));
        assert_eq!(
            ranges("last 10 days", TODAY),
            one("2026-11-13", "2026-11-22")
        );
        // Case does not hide it from the quick look before the expression.
        assert_eq!(
            ranges("PAST 10 Days", TODAY),
            one("2026-11-13", "2026-11-22")
        );
        assert_eq!(ranges("this month", TODAY), one("2026-11-01", "2026-11-22"));
        assert_eq!(ranges("last month", TODAY), one("2026-10-01", "2026-10-31"));
        assert_eq!(
            ranges("on 2026-11-03", TODAY),
            one("2026-11-03", "2026-11-03")
        );
        assert_eq!(
            ranges("2026-11-01..2026-11-05", TODAY),
            one("2026-11-01", "2026-11-05")
        );
        assert_eq!(
            ranges("2026-11-05 to 2026-11-01", TODAY),
            one("2026-11-01", "2026-11-05")
        );
        assert!(ranges("permissions and sandbox", TODAY).is_empty());
    }

    #[test]
    fn week_and_month_boundaries() {
        // Monday: "this week" is just today; "last week" is the whole previous week.
        assert_eq!(
            ranges("this week", "2026-11-16"),
            one("2026-11-16", "2026-11-16")
        );
        assert_eq!(
            ranges("上周", "2026-11-16"),
            one("2026-11-09", "2026-11-15")
        );
        // Across a month boundary, and from March 1st in a leap year back into February.
        assert_eq!(
            ranges("上周", "2026-12-02"),
            one("2026-11-23", "2026-11-29")
        );
        assert_eq!(
            ranges("yesterday", "2028-03-01"),
            one("2028-02-29", "2028-02-29")
        );
        assert_eq!(
            ranges("上个月", "2028-03-15"),
            one("2028-02-01", "2028-02-29")
        );
        assert_eq!(
            ranges("最近7天", "2027-01-03"),
            one("2026-12-28", "2027-01-03")
        );
        assert_eq!(
            ranges("last week", "2027-01-01"),
            one("2026-12-21", "2026-12-27")
        );
    }

    #[test]
    fn the_rest_of_the_query_is_kept_for_keywords() {
        let (_, rest) = parse("上周 权限", d(TODAY));
        assert_eq!(rest.trim(), "权限");
        let (_, rest) = parse("what did we change in the sandbox last week", d(TODAY));
        assert!(rest.contains("sandbox") && !rest.contains("last week"));
    }
}
