//! The `---` YAML front matter of a markdown file other agents also write (a skill's SKILL.md, a
//! custom slash command): read with a size cap, split from the body, parsed leniently (keys nop
//! does not know are ignored; block scalars, quotes and lists are YAML as usual).

use std::path::Path;

use serde::de::DeserializeOwned;

/// The most of such a file nop reads; the rest is left out (and said so by the caller).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// A file read up to [`MAX_FILE_BYTES`] (a regular file only: see [`crate::capped_file`]), and
/// whether it was longer.
pub fn read_capped(path: &Path) -> std::io::Result<(String, bool)> {
    let (bytes, cut) = match crate::capped_file::read_prefix(path, MAX_FILE_BYTES) {
        Ok(Some(read)) => read,
        Ok(None) => return Err(std::io::ErrorKind::NotFound.into()),
        Err(crate::capped_file::CappedError::Io(e)) => return Err(e),
        Err(e) => return Err(std::io::Error::other(e.to_string())),
    };
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        // A cut in the middle of a character is not the file's fault.
        Err(e) if cut => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
        Err(e) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not UTF-8 text ({e})"),
            ));
        }
    };
    Ok((text, cut))
}

/// Why a file's front matter cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    #[error("the front matter that starts on line 1 has no closing `---` line")]
    Unclosed,
    /// Not YAML, or a known key of the wrong type: where, as the YAML parser says it.
    #[error("its front matter is not valid: {0}")]
    Invalid(String),
}

/// The YAML between a leading `---` line and the next `---` line, and the body after it; `None`
/// when the text does not begin with front matter. An opening `---` that is never closed is an
/// error.
pub fn split(text: &str) -> Result<Option<(&str, &str)>, FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(first_end) = text.find('\n') else {
        return Ok(None);
    };
    if text[..first_end].trim_end() != "---" {
        return Ok(None);
    }
    let yaml_start = first_end + 1;
    let mut at = yaml_start;
    while at <= text.len() {
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        if text[at..end].trim_end() == "---" {
            let body = text.get(end + 1..).unwrap_or("");
            return Ok(Some((&text[yaml_start..at], body)));
        }
        at = end + 1;
    }
    Err(FrontMatterError::Unclosed)
}

/// The front matter of `text` as `T` (its default when there is none or it is empty), and the
/// body. A front matter that is not YAML, or whose known keys have the wrong type, is an error
/// whose text says where.
pub fn parse<T: DeserializeOwned + Default>(text: &str) -> Result<(T, &str), FrontMatterError> {
    let Some((yaml, body)) = split(text)? else {
        return Ok((T::default(), text));
    };
    if yaml.trim().is_empty() {
        return Ok((T::default(), body));
    }
    let value: Option<T> =
        serde_saphyr::from_str(yaml).map_err(|e| FrontMatterError::Invalid(e.to_string()))?;
    Ok((value.unwrap_or_default(), body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    struct Meta {
        name: Option<String>,
        description: Option<String>,
    }

    #[test]
    fn block_scalars_quotes_and_unknown_keys() {
        let text = "---\nname: \"pdf\"\ndescription: |-\n  Line one.\n  Use when: forms.\nlicense: Proprietary\nallowed-tools: [Read, Bash]\nmetadata:\n  version: 2\n---\nBody\n";
        let (meta, body) = parse::<Meta>(text).unwrap();
        assert_eq!(meta.name.as_deref(), Some("pdf"));
        assert_eq!(
            meta.description.as_deref(),
            Some("Line one.\nUse when: forms.")
        );
        assert_eq!(body, "Body\n");
    }

    #[test]
    fn no_front_matter_empty_and_unclosed() {
        assert_eq!(parse::<Meta>("# Title\n").unwrap().0, Meta::default());
        assert_eq!(
            parse::<Meta>("---\n---\nx").unwrap(),
            (Meta::default(), "x")
        );
        assert!(parse::<Meta>("---\nname: a\n").is_err());
        assert!(parse::<Meta>("---\nname: [a\n---\n").is_err());
        assert!(parse::<Meta>("---\ndescription: {a: 1}\n---\n").is_err());
        let crlf = parse::<Meta>("---\r\nname: a\r\n---\r\nbody").unwrap();
        assert_eq!(crlf.0.name.as_deref(), Some("a"));
    }
}
