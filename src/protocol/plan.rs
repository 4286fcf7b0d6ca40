//! `plan.xml`: the session's tasks (seed 002 §3.1).
//!
//! ```xml
//! <tasks>
//!   <task id="1" title="Write the parser" description="…" status="in_progress"/>
//! </tasks>
//! ```
//!
//! Parsed by hand over quick-xml's event reader so that every mistake in a hand-edited file is
//! reported with its line and column, and unknown attributes (a typo such as `stauts`) are
//! errors rather than silently dropped data.

use std::collections::HashSet;

use quick_xml::Reader;
use quick_xml::escape::{escape, unescape};
use quick_xml::events::{BytesStart, Event};
use serde::{Deserialize, Serialize};

use super::TextPos;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub tasks: Vec<Task>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub status: TaskStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<TaskStatus> {
        match s {
            "pending" => Some(TaskStatus::Pending),
            "in_progress" => Some(TaskStatus::InProgress),
            "completed" => Some(TaskStatus::Completed),
            "failed" => Some(TaskStatus::Failed),
            _ => None,
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plan.xml that could not be read, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanParseError {
    pub pos: TextPos,
    pub message: String,
}

impl Plan {
    /// The XML text of this plan, as written to plan.xml.
    pub fn to_xml(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<tasks>\n");
        for task in &self.tasks {
            out.push_str("  <task id=\"");
            out.push_str(&escape(task.id.as_str()));
            out.push_str("\" title=\"");
            out.push_str(&escape(task.title.as_str()));
            out.push('"');
            if let Some(description) = &task.description {
                out.push_str(" description=\"");
                out.push_str(&escape_attr(description));
                out.push('"');
            }
            out.push_str(" status=\"");
            out.push_str(task.status.as_str());
            out.push_str("\"/>\n");
        }
        out.push_str("</tasks>\n");
        out
    }

    /// Parses plan.xml text, reporting the first problem with its position.
    pub fn from_xml(text: &str) -> Result<Plan, PlanParseError> {
        let mut reader = Reader::from_str(text);
        reader.config_mut().trim_text(true);
        let err = |offset: u64, message: String| PlanParseError {
            pos: TextPos::of_offset(text, usize::try_from(offset).unwrap_or(usize::MAX)),
            message,
        };
        let mut plan = Plan::default();
        let mut seen_ids = HashSet::new();
        let mut in_tasks = false;
        let mut seen_root = false;
        let mut open_task = false;
        loop {
            let before = reader.buffer_position();
            // The event itself starts at the next `<` (text is trimmed, so whitespace is skipped).
            let start = usize::try_from(before)
                .ok()
                .and_then(|b| text.get(b..)?.find('<').map(|i| (b + i) as u64))
                .unwrap_or(before);
            let event = reader
                .read_event()
                .map_err(|e| err(reader.error_position(), e.to_string()))?;
            let (tag, is_open) = match event {
                Event::Start(tag) => (tag, true),
                Event::Empty(tag) => (tag, false),
                Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => continue,
                Event::End(tag) => {
                    if open_task && tag.name().0 == "task" {
                        open_task = false;
                    } else if in_tasks && tag.name().0 == "tasks" {
                        in_tasks = false;
                    } else {
                        return Err(err(
                            start,
                            format!("unexpected closing tag </{}>", tag.name().0),
                        ));
                    }
                    continue;
                }
                Event::Text(t) if t.trim().is_empty() => continue,
                Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) => {
                    return Err(err(
                        start,
                        "unexpected text; tasks are attributes of <task/>".into(),
                    ));
                }
                Event::Eof => break,
            };
            if !in_tasks {
                if tag.name().0 != "tasks" || seen_root {
                    return Err(err(
                        start,
                        format!(
                            "expected the root element <tasks>, found <{}>",
                            tag.name().0
                        ),
                    ));
                }
                seen_root = true;
                in_tasks = is_open;
                continue;
            }
            if open_task || tag.name().0 != "task" {
                return Err(err(
                    start,
                    format!(
                        "unexpected element <{}> (only <task .../> elements may appear inside <tasks>)",
                        tag.name().0
                    ),
                ));
            }
            let task = parse_task(&tag).map_err(|m| err(start, m))?;
            if !seen_ids.insert(task.id.clone()) {
                return Err(err(start, format!("duplicate task id `{}`", task.id)));
            }
            plan.tasks.push(task);
            open_task = is_open;
        }
        if !seen_root {
            return Err(err(reader.buffer_position(), "no <tasks> element".into()));
        }
        if in_tasks {
            return Err(err(
                reader.buffer_position(),
                "<tasks> is never closed".into(),
            ));
        }
        Ok(plan)
    }
}

/// Newlines in an attribute would be normalised to spaces by any XML reader; keep them.
fn escape_attr(s: &str) -> String {
    escape(s).replace('\n', "&#10;").replace('\r', "&#13;")
}

fn parse_task(tag: &BytesStart<'_>) -> Result<Task, String> {
    let mut id = None;
    let mut title = None;
    let mut description = None;
    let mut status = None;
    for attr in tag.attributes() {
        let attr = attr.map_err(|e| e.to_string())?;
        let key = attr.key.0.to_string();
        let value = unescape(&attr.value)
            .map_err(|e| format!("attribute `{key}`: {e}"))?
            .into_owned();
        match key.as_str() {
            "id" => id = Some(value),
            "title" => title = Some(value),
            "description" => description = Some(value),
            "status" => status = Some(TaskStatus::parse(&value).ok_or_else(|| {
                format!(
                    "task status `{value}` is not one of pending, in_progress, completed, failed"
                )
            })?),
            other => {
                return Err(format!(
                    "unknown attribute `{other}` on <task> (expected id, title, description, status)"
                ));
            }
        }
    }
    let id = id.ok_or("<task> has no `id` attribute")?;
    if id.trim().is_empty() {
        return Err("<task> has an empty `id`".into());
    }
    Ok(Task {
        title: title.ok_or_else(|| format!("task `{id}` has no `title` attribute"))?,
        status: status.ok_or_else(|| format!("task `{id}` has no `status` attribute"))?,
        description,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn sample() -> Plan {
        Plan {
            tasks: vec![
                Task {
                    id: "1".into(),
                    title: "Parse <input> & \"quotes\"".into(),
                    description: Some("line one\nline two".into()),
                    status: TaskStatus::InProgress,
                },
                Task {
                    id: "2".into(),
                    title: "测试".into(),
                    description: None,
                    status: TaskStatus::Pending,
                },
            ],
        }
    }

    #[test]
    fn round_trips() {
        let plan = sample();
        assert_eq!(Plan::from_xml(&plan.to_xml()), Ok(plan));
        assert_eq!(
            Plan::from_xml(&Plan::default().to_xml()),
            Ok(Plan::default())
        );
        assert_eq!(Plan::from_xml("<tasks/>"), Ok(Plan::default()));
    }

    #[test]
    fn accepts_open_task_elements_and_comments() {
        let text = "<!-- mine -->\n<tasks>\n  <task id=\"a\" title=\"A\" status=\"completed\"></task>\n</tasks>";
        let plan = Plan::from_xml(text).map(|p| p.tasks.len());
        assert_eq!(plan, Ok(1));
    }

    #[test]
    fn reports_position_of_bad_status() {
        let text = "<tasks>\n  <task id=\"1\" title=\"x\" status=\"done\"/>\n</tasks>\n";
        let err = Plan::from_xml(text).err();
        assert_eq!(
            err.as_ref().map(|e| e.pos),
            Some(TextPos { line: 2, column: 3 })
        );
        assert!(err.is_some_and(|e| e.message.contains("`done`")));
    }

    #[test]
    fn rejects_typos_duplicates_and_broken_xml() {
        for (text, needle) in [
            (
                "<tasks><task id=\"1\" title=\"x\" stauts=\"pending\"/></tasks>",
                "stauts",
            ),
            (
                "<tasks><task id=\"1\" title=\"x\" status=\"pending\"/><task id=\"1\" title=\"y\" status=\"pending\"/></tasks>",
                "duplicate",
            ),
            (
                "<tasks><task id=\"1\" title=\"x\" status=\"pending\"/>",
                "never closed",
            ),
            ("<plan/>", "root element"),
            ("", "no <tasks>"),
            (
                "<tasks><task id=\"1\" title=\"x\" status=\"pending\"</tasks>",
                "",
            ),
        ] {
            let err = Plan::from_xml(text);
            assert!(
                matches!(&err, Err(e) if e.message.contains(needle)),
                "{text}: {err:?}"
            );
        }
    }
}
