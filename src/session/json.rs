//! How a session's JSON files are written and read back: indented with a final newline, and a
//! `version` that tells a newer format from a broken file.

use std::path::Path;

use serde::Serialize;

use super::error::{Result, SessionError};
use crate::protocol::{SessionFile, Snapshot, TextPos};

/// Indented JSON with a final newline, as every JSON file of a session is written (readable and
/// diffable by hand). A value that cannot be written (it should never happen with plain data)
/// is an error naming `what`, never an empty file.
pub(crate) fn pretty_json(value: &impl Serialize, what: &str) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| SessionError::Serialize {
        what: what.to_string(),
        message: e.to_string(),
    })?;
    bytes.extend_from_slice(b"\n");
    Ok(bytes)
}

/// A file format that carries a `version` field.
pub(crate) trait Versioned {
    fn version(&self) -> u32;
}

impl Versioned for SessionFile {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Versioned for Snapshot {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Versioned for crate::protocol::SealedFile {
    fn version(&self) -> u32 {
        self.version
    }
}

/// Parses a JSON file that carries a `version`, telling a newer format from a broken file.
pub(crate) fn parse_versioned_json<T: serde::de::DeserializeOwned + Versioned>(
    path: &Path,
    bytes: &[u8],
    supported: u32,
) -> Result<T> {
    #[derive(serde::Deserialize)]
    struct OnlyVersion {
        version: u32,
    }
    let too_new = |found: u32| SessionError::TooNew {
        path: path.to_path_buf(),
        found,
        supported,
    };
    match serde_json::from_slice::<T>(bytes) {
        Ok(value) if value.version() > supported => Err(too_new(value.version())),
        Ok(value) => Ok(value),
        Err(e) => Err(match serde_json::from_slice::<OnlyVersion>(bytes) {
            Ok(v) if v.version > supported => too_new(v.version),
            _ => SessionError::Corrupt {
                path: path.to_path_buf(),
                pos: (e.line() > 0).then_some(TextPos {
                    line: e.line(),
                    column: e.column(),
                }),
                message: e
                    .to_string()
                    .split(" at line ")
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            },
        }),
    }
}
