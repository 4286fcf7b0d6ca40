//! Building blocks of the interactive terminal's transcript, as pure functions from text to
//! lines: markdown ([`markdown`]), diffs of edits ([`diff`]), tool results cut to what a person
//! wants to see ([`output`]) and the plan as a checklist ([`plan`]). They never read the
//! environment or the terminal: the caller passes the width and a [`style::Style`] (colour on or off),
//! so the same input always renders the same way.

pub mod diff;
pub mod markdown;
pub mod output;
pub mod plan;
pub mod style;
