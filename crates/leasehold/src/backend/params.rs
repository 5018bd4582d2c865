//! Store URL query parameters, read one way for every store.
//!
//! A store URL's query (`redis://h?prefix=jobs:&max_ttl=30s`) is decoded
//! here and nowhere else: a backend's builder names its parameters in a
//! [`QuerySpec`], parses the query with it, and reads each value through a
//! typed getter of [`QueryParams`]. The rules, the same for every store:
//!
//! - **Decoding**: `application/x-www-form-urlencoded` (the `form_urlencoded`
//!   crate): `%XX` escapes are decoded and `+` is a space (write a literal
//!   `+` as `%2B`). A `%` not followed by two hex digits, or escapes that do
//!   not decode to UTF-8, are an error. Empty pairs (`a=1&&b=2`) are
//!   skipped; a name without `=` has the empty value.
//! - **Each parameter at most once**: a repeated parameter is an error,
//!   never "last one wins".
//! - **Only known parameters**: an unknown one is an error whose message
//!   names the store and lists its parameters.
//! - **Durations** ([`QueryParams::duration`]): `humantime`'s grammar, a
//!   number with a unit, e.g. `250ms`, `30s`, `5m`, `1m30s`, `1h`; a bare
//!   number is refused (its unit would be a guess).
//! - **Booleans** ([`QueryParams::boolean`]): `true`, `on`, `yes`, `1` and
//!   `false`, `off`, `no`, `0`, lower case.
//! - **Integers** ([`QueryParams::integer`]): decimal digits only, no sign.
//!
//! # Secrets
//! URLs carry passwords, keys and SAS tokens, and a secret pasted into the
//! query by mistake must not be printed back. Messages about an unknown,
//! repeated or badly encoded parameter name it but never show its value,
//! and name it only when it looks like a parameter name (at most 32 of
//! `A-Z a-z 0-9 _ . -`). Only the typed getters repeat a value, the one
//! that is not a duration, boolean or integer as the store declared.
//!
//! ```
//! use leasehold::backend::params::QuerySpec;
//! use std::time::Duration;
//!
//! const PARAMS: QuerySpec = QuerySpec::new("redis", &["prefix", "max_ttl", "wake_ups"]);
//! let (base, query) = PARAMS.parse_url("redis://h?max_ttl=1m30s&wake_ups=off")?;
//! assert_eq!(base, "redis://h");
//! assert_eq!(query.duration("max_ttl")?, Some(Duration::from_secs(90)));
//! assert_eq!(query.boolean("wake_ups")?, Some(false));
//! assert_eq!(query.string("prefix"), None);
//! let err = PARAMS.parse(Some("prefx=a")).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "invalid store URL: unknown parameter \"prefx\"; the redis store's parameters are prefix, max_ttl and wake_ups"
//! );
//! # Ok::<(), leasehold::Error>(())
//! ```

use std::time::Duration;

use crate::{Error, Result};

/// What every message of this module is about.
const WHAT: &str = "store URL";

/// The query parameters a store takes, and the store's name for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuerySpec {
    store: &'static str,
    params: &'static [&'static str],
}

impl QuerySpec {
    /// The parameters `params` of the store called `store` in messages
    /// (`"redis"`, `"azblob"`, ...).
    pub const fn new(store: &'static str, params: &'static [&'static str]) -> Self {
        QuerySpec { store, params }
    }

    /// The store's name, as messages give it.
    pub fn store(&self) -> &'static str {
        self.store
    }

    /// The parameters the store takes.
    pub fn params(&self) -> &'static [&'static str] {
        self.params
    }

    /// Decodes `query` (the part after `?`, without it; `None` or empty for
    /// none) and checks its names against this store's.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for bad percent-encoding, a repeated
    /// parameter or an unknown one; the message never holds a value.
    pub fn parse(&self, query: Option<&str>) -> Result<QueryParams> {
        let params = QueryParams::decode(query.unwrap_or_default(), Some(*self))?;
        if let Some((name, _)) = params.pairs.iter().find(|(n, _)| !self.knows(n)) {
            return Err(Error::invalid(
                WHAT,
                format!("unknown parameter {}; {}", shown(name), self.listing()),
            ));
        }
        Ok(params)
    }

    /// Splits `url` at its first `?` and [`parse`](Self::parse)s the query:
    /// the URL before the `?`, and its parameters.
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn parse_url<'u>(&self, url: &'u str) -> Result<(&'u str, QueryParams)> {
        let (base, query) = split_query(url);
        Ok((base, self.parse(query)?))
    }

    fn knows(&self, name: &str) -> bool {
        self.params.contains(&name)
    }

    /// "the redis store's parameters are a, b and c".
    fn listing(&self) -> String {
        let store = self.store;
        match self.params {
            [] => format!("the {store} store takes no parameters"),
            [one] => format!("the {store} store's only parameter is {one}"),
            [init @ .., last] => format!(
                "the {store} store's parameters are {} and {last}",
                init.join(", ")
            ),
        }
    }
}

/// `url` split at its first `?`: what comes before, and the query after it
/// (`None` without a `?`).
pub fn split_query(url: &str) -> (&str, Option<&str>) {
    match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    }
}

/// One query component (a value, or a name) decoded as [`QuerySpec::parse`]
/// decodes it: `%XX` escapes, `+` as a space; `&` and `=` are plain text
/// here. `None` if a `%` is not followed by two hex digits or the result
/// is not UTF-8.
pub fn decode_query_component(raw: &str) -> Option<String> {
    if !well_encoded(raw) {
        return None;
    }
    // As one pair's name: a literal `&` or `=` would split it.
    let escaped = raw.replace('&', "%26").replace('=', "%3D");
    let decoded = form_urlencoded::parse(escaped.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned());
    Some(decoded.unwrap_or_default())
}

/// A URL component outside the query (a user name or password in the
/// authority) with its `%XX` escapes decoded; `+` stays a `+` there.
/// `None` if a `%` is not followed by two hex digits or the result is not
/// UTF-8.
pub fn decode_percent(raw: &str) -> Option<String> {
    if !well_encoded(raw) {
        return None;
    }
    let decoded = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()?;
    Some(decoded.into_owned())
}

/// A decoded query whose names a store has accepted (from
/// [`QuerySpec::parse`]), read through typed getters. Each getter takes a
/// parameter name of the store's [`QuerySpec`] and returns `None` when the
/// query does not hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryParams {
    spec: Option<QuerySpec>,
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    /// Decodes `query` accepting every parameter name, each still at most
    /// once: for a tool that reads one parameter of a URL that its store
    /// has already accepted (a store's own builder uses
    /// [`QuerySpec::parse`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for bad percent-encoding or a repeated
    /// parameter.
    pub fn parse_any(query: &str) -> Result<Self> {
        Self::decode(query, None)
    }

    fn decode(query: &str, spec: Option<QuerySpec>) -> Result<Self> {
        let listing = || {
            spec.map(|s| format!("; {}", s.listing()))
                .unwrap_or_default()
        };
        let mut pairs: Vec<(String, String)> = Vec::new();
        for raw in query.split('&').filter(|p| !p.is_empty()) {
            let mut decoded = form_urlencoded::parse(raw.as_bytes());
            let Some((name, value)) = decoded.next() else {
                continue;
            };
            if !well_encoded(raw) {
                return Err(Error::invalid(
                    WHAT,
                    format!(
                        "the parameter {} is not valid percent-encoded UTF-8 (a % must be followed by two hex digits; the value is not shown here)",
                        shown(&name)
                    ),
                ));
            }
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(Error::invalid(
                    WHAT,
                    format!(
                        "the parameter {} is given more than once{}",
                        shown(&name),
                        listing()
                    ),
                ));
            }
            pairs.push((name.into_owned(), value.into_owned()));
        }
        Ok(QueryParams { spec, pairs })
    }

    /// Every parameter given, decoded, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether the query holds no parameter.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The decoded value of `name`, as given (possibly empty).
    pub fn string(&self, name: &str) -> Option<&str> {
        debug_assert!(
            self.spec.is_none_or(|s| s.knows(name)),
            "{name:?} is not a parameter of the {} store's QuerySpec",
            self.spec.map_or("", |s| s.store)
        );
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name` as a duration (`250ms`, `30s`, `5m`, `1m30s`,
    /// `1h`: `humantime`'s grammar; a unit is required).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the parameter and its value.
    pub fn duration(&self, name: &str) -> Result<Option<Duration>> {
        self.typed(name, "a duration such as 250ms, 30s, 5m or 1m30s", |v| {
            humantime::parse_duration(v).ok()
        })
    }

    /// The value of `name` as a boolean: `true`, `on`, `yes`, `1` or
    /// `false`, `off`, `no`, `0`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the parameter and its value.
    pub fn boolean(&self, name: &str) -> Result<Option<bool>> {
        self.typed(
            name,
            "true or false (also on/off, yes/no, 1/0)",
            |v| match v {
                "true" | "on" | "yes" | "1" => Some(true),
                "false" | "off" | "no" | "0" => Some(false),
                _ => None,
            },
        )
    }

    /// The value of `name` as a non-negative integer: decimal digits only.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the parameter and its value.
    pub fn integer(&self, name: &str) -> Result<Option<u64>> {
        self.typed(
            name,
            "a whole number of decimal digits (at most 18446744073709551615)",
            |v| {
                v.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| v.parse().ok())
                    .flatten()
            },
        )
    }

    fn typed<T>(
        &self,
        name: &str,
        expected: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match parse(value) {
            Some(parsed) => Ok(Some(parsed)),
            None => Err(Error::invalid(
                WHAT,
                format!("{name} must be {expected}, not {value:?}"),
            )),
        }
    }
}

/// Whether every `%` in `raw` starts a two-hex-digit escape and the
/// escapes decode to UTF-8.
fn well_encoded(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let escapes_ok = bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    escapes_ok
        && percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .is_ok()
}

/// A parameter name as messages show it: quoted when it looks like a
/// parameter name, otherwise not at all (it may be a secret pasted into
/// the query).
fn shown(name: &str) -> String {
    let plain = (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if plain {
        format!("{name:?}")
    } else if name.is_empty() {
        "with an empty name".to_string()
    } else {
        "(its name is not shown: it may be a secret)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: QuerySpec = QuerySpec::new("test", &["ttl", "on", "n", "name"]);

    fn parse(query: &str) -> Result<QueryParams> {
        SPEC.parse(Some(query))
    }

    fn message(err: Error) -> String {
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        err.to_string()
    }

    #[test]
    fn durations_follow_humantime_and_need_a_unit() {
        for (text, want) in [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1m30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
        ] {
            let q = parse(&format!("ttl={text}")).unwrap();
            assert_eq!(q.duration("ttl").unwrap(), Some(want), "{text}");
        }
        for bad in ["3", "soon", "-1s", ""] {
            let err = parse(&format!("ttl={bad}")).unwrap().duration("ttl");
            let text = message(err.unwrap_err());
            assert!(text.contains("ttl must be a duration such as"), "{text}");
        }
    }

    #[test]
    fn booleans_have_four_spellings_each_way() {
        for (text, want) in [
            ("true", true),
            ("on", true),
            ("yes", true),
            ("1", true),
            ("false", false),
            ("off", false),
            ("no", false),
            ("0", false),
        ] {
            let q = parse(&format!("on={text}")).unwrap();
            assert_eq!(q.boolean("on").unwrap(), Some(want), "{text}");
        }
        for bad in ["TRUE", "maybe", "2", "", "y"] {
            let err = parse(&format!("on={bad}")).unwrap().boolean("on");
            let text = message(err.unwrap_err());
            assert!(text.contains("on must be true or false"), "{text}");
        }
    }

    #[test]
    fn integers_are_decimal_digits_only() {
        let q = parse("n=42").unwrap();
        assert_eq!(q.integer("n").unwrap(), Some(42));
        for bad in ["+1", "-1", "1_000", "0x10", "", "99999999999999999999"] {
            let err = parse(&format!("n={bad}")).unwrap().integer("n");
            assert!(message(err.unwrap_err()).contains("n must be a whole number"));
        }
    }

    #[test]
    fn absent_parameters_are_none() {
        for q in [SPEC.parse(None).unwrap(), parse("").unwrap()] {
            assert!(q.is_empty());
            assert_eq!(q.string("name"), None);
            assert_eq!(q.duration("ttl").unwrap(), None);
            assert_eq!(q.boolean("on").unwrap(), None);
            assert_eq!(q.integer("n").unwrap(), None);
        }
    }

    #[test]
    fn a_repeated_parameter_is_an_error_not_an_override() {
        for query in ["ttl=1s&ttl=2s", "ttl=1s&ttl=1s", "name=a&on=1&name"] {
            let text = message(parse(query).unwrap_err());
            assert!(text.contains("is given more than once"), "{text}");
            assert!(
                text.contains("the test store's parameters are ttl, on, n and name"),
                "{text}"
            );
        }
        // Repeated under another spelling of the same name.
        assert!(parse("name=a&%6Eame=b").is_err());
        assert!(QueryParams::parse_any("x=1&x=2").is_err());
    }

    #[test]
    fn an_unknown_parameter_names_the_store_and_its_parameters() {
        let text = message(parse("ttl=1s&color=red").unwrap_err());
        assert_eq!(
            text,
            "invalid store URL: unknown parameter \"color\"; the test store's parameters are ttl, on, n and name"
        );
        let one = QuerySpec::new("sqlite", &["max_ttl"]);
        let text = message(one.parse(Some("x=1")).unwrap_err());
        assert!(
            text.contains("the sqlite store's only parameter is max_ttl"),
            "{text}"
        );
        let none = QuerySpec::new("bare", &[]);
        let text = message(none.parse(Some("x=1")).unwrap_err());
        assert!(
            text.contains("the bare store takes no parameters"),
            "{text}"
        );
    }

    #[test]
    fn values_are_percent_decoded_with_plus_as_space() {
        let q = parse("name=http%3A%2F%2Fh%3A1%2Fa+b%2Bc&ttl=1%6D").unwrap();
        assert_eq!(q.string("name"), Some("http://h:1/a b+c"));
        assert_eq!(q.duration("ttl").unwrap(), Some(Duration::from_secs(60)));
        // Names are decoded too.
        assert_eq!(parse("%6Eame=x").unwrap().string("name"), Some("x"));
        let q = parse("name=%C3%A9t%C3%A9").unwrap();
        assert_eq!(q.string("name"), Some("été"));
    }

    #[test]
    fn bad_percent_encoding_is_refused_without_the_value() {
        for query in [
            "name=%zzS3CRET",
            "name=S3CRET%4",
            "name=S3CRET%C3",
            "name=S3CRET%FF",
        ] {
            let text = message(parse(query).unwrap_err());
            assert!(
                text.contains("\"name\" is not valid percent-encoded"),
                "{text}"
            );
            assert!(!text.contains("S3CRET"), "{query}: {text}");
        }
    }

    #[test]
    fn empty_values_and_empty_pairs() {
        let q = parse("name=&&on=1&").unwrap();
        assert_eq!(q.string("name"), Some(""));
        assert_eq!(q.iter().count(), 2);
        // A name without `=` has the empty value.
        assert_eq!(parse("name").unwrap().string("name"), Some(""));
    }

    #[test]
    fn secrets_are_never_repeated() {
        // An unknown parameter: its name, not its value.
        let text = message(parse("sig=S3CRET").unwrap_err());
        assert!(
            text.contains("\"sig\"") && !text.contains("S3CRET"),
            "{text}"
        );
        // A repeated one: neither value.
        let text = message(parse("name=S3CRET1&name=S3CRET2").unwrap_err());
        assert!(!text.contains("S3CRET"), "{text}");
        // A secret pasted as a name is not shown either.
        let text = message(parse("S3CRET+KEY%2F%2Bxyz").unwrap_err());
        assert!(
            !text.contains("S3CRET") && text.contains("not shown"),
            "{text}"
        );
        let text = message(parse("=S3CRET").unwrap_err());
        assert!(
            text.contains("unknown parameter with an empty name") && !text.contains("S3CRET"),
            "{text}"
        );
        let long = "a".repeat(33);
        assert!(!message(parse(&long).unwrap_err()).contains(&long));
    }

    #[test]
    fn split_query_splits_at_the_first_question_mark() {
        assert_eq!(split_query("x://h?a=1?b"), ("x://h", Some("a=1?b")));
        assert_eq!(split_query("x://h"), ("x://h", None));
        let (base, q) = SPEC.parse_url("x://h/p?name=a%20b").unwrap();
        assert_eq!(base, "x://h/p");
        assert_eq!(q.string("name"), Some("a b"));
    }

    #[test]
    fn parse_any_takes_every_name() {
        let q = QueryParams::parse_any("max_ttl=30s&sig=x").unwrap();
        assert_eq!(
            q.duration("max_ttl").unwrap(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(q.string("sig"), Some("x"));
    }

    #[test]
    fn components_decode_with_and_without_plus_as_space() {
        assert_eq!(decode_query_component("a%40b+c").as_deref(), Some("a@b c"));
        assert_eq!(decode_query_component("p=q&r").as_deref(), Some("p=q&r"));
        assert_eq!(decode_query_component("").as_deref(), Some(""));
        assert_eq!(decode_percent("a%40b+c").as_deref(), Some("a@b+c"));
        for bad in ["%zz", "%FF", "%4"] {
            assert_eq!(decode_query_component(bad), None, "{bad}");
            assert_eq!(decode_percent(bad), None, "{bad}");
        }
    }
}
