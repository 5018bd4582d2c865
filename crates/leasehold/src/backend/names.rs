//! Key ↔ object name mapping, for stores whose records are objects named
//! in a URL path (Azure blobs, S3 objects).
//!
//! # Object names
//! The object for key `K` under prefix `P` is `P/` + escape(`K`) (just
//! escape(`K`) without a prefix). Keys use only `A-Z a-z 0-9 . _ : / -`,
//! all fine in object names, except that names (and path segments) ending
//! in `.` are mishandled (Azure drops them; `.` and `..` segments are
//! normalised away by HTTP clients and servers): a `.` that ends a
//! `/`-separated segment is
//! written `~2E`. `~` never occurs in keys, so the mapping is reversible:
//! unescaping replaces every `~2E` by `.`. Examples: `import-A` →
//! `import-A`; `jobs/v1./x.` → `jobs/v1~2E/x~2E`; `a/../b` → `a/.~2E/b`.

use crate::error::{Error, Result};
use crate::key::Key;

const ESCAPED_DOT: &str = "~2E";

/// The object name of `key` under `prefix` ("" or ending in `/`).
pub fn object_name(prefix: &str, key: &Key) -> String {
    format!("{prefix}{}", escape(key.as_str()))
}

/// The object-name prefix of a store prefix a user gave (`""`, or a
/// key-shaped path, leading and trailing `/` ignored): `""` or the escaped
/// prefix plus `/`.
///
/// # Errors
/// [`Error::InvalidInput`] naming the rule a prefix follows.
pub fn object_prefix(prefix: &str) -> Result<String> {
    let p = prefix.trim_matches('/');
    if p.is_empty() {
        return Ok(String::new());
    }
    let key = Key::new(p).map_err(|_| {
        Error::invalid(
            "prefix",
            format!(
                "{prefix:?}: a prefix follows the key rule (1-256 characters from A-Z a-z 0-9 . _ : / -, no doubled '/')"
            ),
        )
    })?;
    Ok(format!("{}/", escape(key.as_str())))
}

/// The escaped form of a key.
pub fn escape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.char_indices() {
        let ends_segment = i + 1 == bytes.len() || bytes[i + 1] == b'/';
        if c == '.' && ends_segment {
            out.push_str(ESCAPED_DOT);
        } else {
            out.push(c);
        }
    }
    out
}

/// The server-side listing prefix for key prefix `prefix`: the escaped
/// prefix without trailing dots (whose escaping depends on what follows).
/// Callers filter the decoded keys by the real prefix.
pub fn list_prefix(object_prefix: &str, prefix: &str) -> String {
    // Without its trailing dots the prefix cannot end in one, so escaping
    // it never guesses wrong about a segment's end.
    format!("{object_prefix}{}", escape(prefix.trim_end_matches('.')))
}

/// The key an object name under `prefix` stands for, if it is one of ours.
pub fn key_of(prefix: &str, object: &str) -> Option<Key> {
    let escaped = object.strip_prefix(prefix)?;
    let key = escaped.replace(ESCAPED_DOT, ".");
    if key.contains('~') || escape(&key) != escaped {
        return None;
    }
    Key::new(key).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (key, name) in [
            ("import-A", "import-A"),
            ("jobs/nightly/import.v2", "jobs/nightly/import.v2"),
            ("a.", "a~2E"),
            ("a/./b", "a/~2E/b"),
            ("a/../b", "a/.~2E/b"),
            ("x.../y", "x..~2E/y"),
            ("ns:key_1", "ns:key_1"),
        ] {
            let k = Key::new(key).unwrap();
            assert_eq!(object_name("p/", &k), format!("p/{name}"));
            assert_eq!(key_of("p/", &format!("p/{name}")), Some(k));
        }
        assert_eq!(key_of("p/", "p/a~2F"), None);
        assert_eq!(key_of("p/", "p/a."), None, "not produced by escape");
        assert_eq!(key_of("p/", "q/a"), None);
    }

    #[test]
    fn list_prefixes_are_prefixes_of_escaped_keys() {
        for (prefix, key) in [
            ("jobs/", "jobs/a"),
            ("a.", "a.b"),
            ("a.", "a."),
            ("a..", "a...c"),
            ("", "x."),
            ("a/.", "a/.x"),
        ] {
            let k = Key::new(key).unwrap();
            assert!(
                object_name("p/", &k).starts_with(&list_prefix("p/", prefix)),
                "{prefix:?} {key:?}"
            );
        }
    }
}
