//! A queued message's priority (seed 004): shared by the queue, the configuration and the
//! front ends.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum QueuePriority {
    /// Waits until the current task is done.
    Normal,
    /// Put into the conversation at the next checkpoint (between tool calls).
    #[default]
    High,
    /// Like high, ahead of it.
    Urgent,
}

impl QueuePriority {
    /// Order in the queue: urgent first.
    pub fn rank(self) -> u8 {
        match self {
            QueuePriority::Urgent => 0,
            QueuePriority::High => 1,
            QueuePriority::Normal => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueuePriority::Urgent => "urgent",
            QueuePriority::High => "high",
            QueuePriority::Normal => "normal",
        }
    }
}

/// A priority's name that is none of [`QueuePriority`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a priority: normal, high or urgent")]
pub struct UnknownPriority(pub String);

impl std::str::FromStr for QueuePriority {
    type Err = UnknownPriority;

    fn from_str(s: &str) -> Result<QueuePriority, UnknownPriority> {
        match s {
            "normal" => Ok(QueuePriority::Normal),
            "high" => Ok(QueuePriority::High),
            "urgent" => Ok(QueuePriority::Urgent),
            other => Err(UnknownPriority(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priority_is_one_of_three_names() {
        assert_eq!("urgent".parse::<QueuePriority>(), Ok(QueuePriority::Urgent));
        assert_eq!(
            "now".parse::<QueuePriority>().map_err(|e| e.to_string()),
            Err("`now` is not a priority: normal, high or urgent".to_string())
        );
    }
}
