//! Lock keys: one portable rule for every backend.

use std::fmt;

use crate::error::{Error, Result};

/// The longest key accepted, in characters (all of them ASCII).
pub const MAX_KEY_LEN: usize = 256;

/// A validated lock key.
///
/// The rule is the same on every backend, so a key that works on SQLite works
/// on Azure and DynamoDB too:
///
/// * 1 to [`MAX_KEY_LEN`] characters;
/// * only `A-Z a-z 0-9 . _ : / -`;
/// * no leading or trailing `/`, no `//`.
///
/// `/` separates levels for [`list`](crate::Store::list) prefixes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

const RULE: &str =
    "a key is 1-256 characters from A-Z a-z 0-9 . _ : / - with no leading, trailing or doubled '/'";

impl Key {
    /// Validates `key` against the rule above.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the rule when `key` breaks it.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        validate(&key)?;
        Ok(Key(key))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate(key: &str) -> Result<()> {
    let fail = |why: String| Err(Error::invalid("key", format!("{why}; {RULE}")));
    if key.is_empty() {
        return fail("the key is empty".into());
    }
    if key.len() > MAX_KEY_LEN {
        return fail(format!("the key is {} characters long", key.len()));
    }
    if let Some(c) = key.chars().find(|c| !is_key_char(*c)) {
        return fail(format!("{key:?} contains {c:?}"));
    }
    if key.starts_with('/') || key.ends_with('/') || key.contains("//") {
        return fail(format!("{key:?} has a leading, trailing or doubled '/'"));
    }
    Ok(())
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')
}

/// Validates a `list` prefix: empty, or a key-shaped string that may end in `/`.
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
    validate(trimmed).map_err(|_| {
        Error::invalid(
            "prefix",
            format!("{prefix:?} is not a valid prefix; it must be empty or a key, optionally followed by '/'"),
        )
    })
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Key {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        Key::new(value)
    }
}

impl TryFrom<String> for Key {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        Key::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_portable_keys() {
        for k in [
            "a",
            "import-A",
            "jobs/nightly/import.v2",
            "ns:key_1",
            &"x".repeat(256),
        ] {
            assert_eq!(Key::new(k).unwrap().as_str(), k);
        }
    }

    #[test]
    fn rejects_bad_keys_naming_the_rule() {
        for k in [
            "",
            "/a",
            "a/",
            "a//b",
            "sp ace",
            "ümlaut",
            "a*b",
            &"x".repeat(257),
        ] {
            let err = Key::new(k).unwrap_err();
            assert!(
                matches!(err, Error::InvalidInput { what: "key", .. }),
                "{k:?}"
            );
            assert!(err.to_string().contains("1-256 characters"), "{err}");
        }
    }

    #[test]
    fn prefixes_may_end_in_slash() {
        validate_prefix("").unwrap();
        validate_prefix("jobs/").unwrap();
        validate_prefix("jobs").unwrap();
        assert!(validate_prefix("/jobs").is_err());
        assert!(validate_prefix("jobs//").is_err());
    }
}
