//! Building blocks of the interactive terminal's transcript, as pure functions from text to
//! lines: markdown ([`markdown`]) and diffs of edits ([`diff`]). They never read the
//! environment or the terminal: the caller passes the width and a [`style::Style`] (colour on
//! or off), so the same input always renders the same way.

pub mod diff;
pub mod markdown;
pub mod style;
