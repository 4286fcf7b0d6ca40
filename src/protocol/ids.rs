//! Session and snapshot ids: short, unique, and sortable by creation time.
//!
//! An id is the 48-bit millisecond timestamp of a UUIDv7 in lowercase Crockford base32 (10
//! characters, so ids sort by creation time as plain strings) followed by 4 characters of its
//! random bits, e.g. `01kaq3m7x2-4hzc`. Uniqueness across processes is finally guaranteed by the
//! store, which creates each id's directory or file with create-new semantics and retries.

use chrono::{DateTime, Utc};

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A new time-ordered id.
pub fn new_id() -> String {
    let uuid = uuid::Uuid::now_v7();
    let value = uuid.as_u128();
    let millis = (value >> 80) as u64;
    // Bits 0..62 of a v7 UUID are random; take 20 of them.
    let random = (value & 0xF_FFFF) as u64;
    let mut id = String::with_capacity(15);
    push_base32(&mut id, millis, 10);
    id.push('-');
    push_base32(&mut id, random, 4);
    id
}

fn push_base32(out: &mut String, value: u64, digits: u32) {
    for i in (0..digits).rev() {
        let index = ((value >> (5 * i)) & 31) as usize;
        out.push(char::from(CROCKFORD[index]));
    }
}

/// A timestamp for file names such as `out-<ts>.log`: sortable, no characters that need quoting.
pub fn timestamp_for_file(now: DateTime<Utc>) -> String {
    now.format("%Y%m%dT%H%M%S%.6fZ")
        .to_string()
        .replace('.', "")
}

/// Whether `s` has the shape of an id made by [`new_id`] (used to skip foreign directories).
pub fn looks_like_id(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.len() == 15
        && bytes[10] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 10 || CROCKFORD.contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_sortable_and_well_formed() {
        let ids: Vec<String> = (0..2000).map(|_| new_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        // Same-millisecond ids may order randomly among themselves, but never before an
        // earlier millisecond.
        for pair in ids.windows(2) {
            assert!(pair[0][..10] <= pair[1][..10], "{pair:?}");
        }
        assert!(ids.iter().all(|id| looks_like_id(id)), "{ids:?}");
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert!(unique.len() > 1990, "too many collisions: {}", unique.len());
    }

    #[test]
    fn file_timestamps_sort_and_need_no_quoting() {
        let ts = timestamp_for_file(Utc::now());
        assert!(ts.chars().all(|c| c.is_ascii_alphanumeric()), "{ts}");
    }
}
