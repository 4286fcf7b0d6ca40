//! The session's plan as a checklist, shown when it changes.

use nop::protocol::{Plan, TaskStatus};

use super::style::{self, Style};

/// One line per task, in the plan's order (tasks are a flat list: plan.xml has no subtasks):
///
/// | status        | mark | look        |
/// |---------------|------|-------------|
/// | `pending`     | ☐    | plain       |
/// | `in_progress` | ◐    | bold        |
/// | `completed`   | ☑    | dim         |
/// | `failed`      | ☒    | red         |
///
/// An empty plan has no lines.
pub fn checklist(plan: &Plan, style: Style) -> Vec<String> {
    plan.tasks
        .iter()
        .map(|task| {
            let title = style::sanitize(&task.title);
            let (mark, sgr): (&str, &[u8]) = match task.status {
                TaskStatus::Pending => ("☐", &[]),
                TaskStatus::InProgress => ("◐", &[style::BOLD]),
                TaskStatus::Completed => ("☑", &[style::DIM]),
                TaskStatus::Failed => ("☒", &[style::RED]),
            };
            style.paint(&format!("{mark} {title}"), sgr)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use insta::assert_snapshot;
    use nop::protocol::Task;

    fn plan() -> Plan {
        let task = |id: &str, title: &str, status| Task {
            id: id.into(),
            title: title.into(),
            description: None,
            status,
        };
        Plan {
            tasks: vec![
                task("1", "Read the parser", TaskStatus::Completed),
                task("2", "Fix the unicode test", TaskStatus::InProgress),
                task("3", "Deploy to staging", TaskStatus::Failed),
                task("4", "Update the changelog", TaskStatus::Pending),
            ],
        }
    }

    #[test]
    fn every_status_has_its_mark() {
        assert_snapshot!(checklist(&plan(), Style::PLAIN).join("\n"));
    }

    #[test]
    fn colour_dims_the_done_and_bolds_the_current() {
        let lines = checklist(&plan(), Style::COLOR);
        assert_eq!(
            lines,
            [
                "\x1b[2m☑ Read the parser\x1b[0m",
                "\x1b[1m◐ Fix the unicode test\x1b[0m",
                "\x1b[31m☒ Deploy to staging\x1b[0m",
                "☐ Update the changelog",
            ]
        );
    }

    #[test]
    fn an_empty_plan_has_no_lines() {
        assert!(checklist(&Plan::default(), Style::PLAIN).is_empty());
    }
}
