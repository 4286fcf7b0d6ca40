//! Building blocks of the interactive terminal's transcript, as pure functions from text to
//! lines: markdown ([`markdown`]), diffs of edits ([`diff`]), tool results cut to what a person
//! wants to see ([`output`]), the plan as a checklist ([`plan`]) and the words for a run's
//! course, shared with plain text ([`notes`]). They never read the environment or the terminal:
//! the caller passes the width and a [`style::Style`] (colour on or off), so the same input
//! always renders the same way.

pub mod diff;
pub mod markdown;
pub mod notes;
pub mod output;
pub mod plan;
pub mod style;
