//! Assertions for a store builder's unit tests: names it accepts and
//! refuses, URLs it refuses without repeating their secret, and a `Debug`
//! that hides the secret.

use leasehold::{Error, Result};

/// `parse` refuses every URL of `urls` as [`Error::InvalidInput`], and the
/// error (its `Display` and `Debug`) never holds `secret`.
///
/// # Panics
/// When a URL is accepted, refused otherwise, or its error shows `secret`.
pub fn assert_refused_without<T>(urls: &[&str], secret: &str, parse: impl Fn(&str) -> Result<T>) {
    for url in urls {
        let Err(err) = parse(url) else {
            panic!("{url}: accepted");
        };
        let text = format!("{err} {err:?}");
        assert!(matches!(err, Error::InvalidInput { .. }), "{url}: {text}");
        assert!(!text.contains(secret), "{url}: {text}");
    }
}

/// `check` accepts every name of `good` and refuses every name of `bad`.
///
/// # Panics
/// When it does not.
pub fn assert_names(check: impl Fn(&str) -> Result<()>, good: &[&str], bad: &[&str]) {
    for name in good {
        assert!(check(name).is_ok(), "{name}");
    }
    for name in bad {
        assert!(check(name).is_err(), "{name}");
    }
}

/// `value`'s `Debug` shows `shown` but never `secret`.
///
/// # Panics
/// When it does not.
pub fn assert_debug_hides(value: &dyn std::fmt::Debug, secret: &str, shown: &str) {
    let text = format!("{value:?}");
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains(shown), "{text}");
}
