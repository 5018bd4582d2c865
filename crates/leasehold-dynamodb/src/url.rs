//! Parsing `dynamodb://TABLE?region=…&endpoint=…` store URLs.

use std::time::Duration;

use leasehold::{Error, Result};

use crate::builder::DynamoDbBackendBuilder;
use crate::TakeoverMode;

const WHAT: &str = "store URL";
const FORM: &str = "the form is dynamodb://TABLE?region=REGION&endpoint=URL&profile=NAME&max_clock_skew=DURATION&max_ttl=DURATION&create_table=true|false, every parameter optional";

/// Turns a store URL into a builder (nothing is contacted yet).
///
/// Error messages name the offending parameter but never repeat values that
/// could be secret (only the table name, region and endpoint are echoed, and
/// an endpoint carrying user info is refused without being repeated).
pub(crate) fn parse(url: &str) -> Result<DynamoDbBackendBuilder> {
    let rest = url.strip_prefix("dynamodb://").ok_or_else(|| {
        Error::invalid(
            WHAT,
            format!("a DynamoDB store URL starts with dynamodb://; {FORM}"),
        )
    })?;
    let (table, query) = match rest.split_once('?') {
        Some((t, q)) => (t, Some(q)),
        None => (rest, None),
    };
    let table = table.strip_suffix('/').unwrap_or(table);
    let mut builder = DynamoDbBackendBuilder::new(table);
    let mut seen: Vec<&str> = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
        // A second value would silently override the first.
        if seen.contains(&name) {
            return Err(Error::invalid(
                WHAT,
                format!("the parameter {name:?} is given more than once"),
            ));
        }
        seen.push(name);
        let value = percent_decode(raw).ok_or_else(|| {
            Error::invalid(
                WHAT,
                format!("the value of {name:?} is not valid percent-encoded UTF-8"),
            )
        })?;
        builder = match name {
            "region" => builder.region(value),
            "endpoint" => builder.endpoint(value),
            "profile" => builder.profile(value),
            "max_clock_skew" => builder.takeover(TakeoverMode::TrustClocks {
                max_skew: parse_duration(&value).ok_or_else(|| {
                    Error::invalid(
                        WHAT,
                        format!("max_clock_skew must be a duration such as 500ms, 2s or 1m, not {value:?}"),
                    )
                })?,
            }),
            "max_ttl" => builder.max_ttl(parse_duration(&value).ok_or_else(|| {
                Error::invalid(
                    WHAT,
                    format!("max_ttl must be a duration such as 60s, 5m or 1h, not {value:?}"),
                )
            })?),
            "create_table" => builder.create_table(match value.as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => {
                    return Err(Error::invalid(
                        WHAT,
                        "create_table must be true or false",
                    ))
                }
            }),
            other => {
                // Only the name: the value might be something secret put
                // there by mistake.
                return Err(Error::invalid(
                    WHAT,
                    format!("unknown parameter {other:?}; {FORM}"),
                ));
            }
        };
    }
    Ok(builder)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `250ms`, `2s`, `1m`, `1h`; a bare number is seconds.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: u64 = num.parse().ok()?;
    Some(match unit {
        "ms" => Duration::from_millis(num),
        "" | "s" => Duration::from_secs(num),
        "m" => Duration::from_secs(num.checked_mul(60)?),
        "h" => Duration::from_secs(num.checked_mul(3600)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_parameter_is_an_error_not_an_override() {
        let Err(err) = parse("dynamodb://locks?region=eu-west-1&region=us-east-1") else {
            panic!("a repeated region was accepted");
        };
        assert!(
            err.to_string()
                .contains("\"region\" is given more than once"),
            "{err}"
        );
    }

    #[test]
    fn parses_every_parameter() {
        let b = parse("dynamodb://locks?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000&profile=dev&max_clock_skew=2s&create_table=false").unwrap();
        assert_eq!(b.table, "locks");
        assert_eq!(b.region.as_deref(), Some("eu-west-1"));
        assert_eq!(b.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(b.profile.as_deref(), Some("dev"));
        assert_eq!(
            b.takeover,
            TakeoverMode::TrustClocks {
                max_skew: Duration::from_secs(2)
            }
        );
        assert!(!b.create_table);
        let b = parse("dynamodb://locks?max_ttl=5m").unwrap();
        assert_eq!(b.max_ttl, Duration::from_secs(300));
    }

    #[test]
    fn unencoded_endpoint_and_bare_table() {
        let b = parse("dynamodb://locks?endpoint=http://127.0.0.1:8000&region=us-east-1").unwrap();
        assert_eq!(b.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        let b = parse("dynamodb://locks").unwrap();
        assert_eq!(b.table, "locks");
        assert!(b.region.is_none() && b.endpoint.is_none());
        assert_eq!(b.takeover, TakeoverMode::Observe);
    }

    #[test]
    fn unknown_parameters_are_named_not_echoed() {
        let err = parse("dynamodb://locks?secret_key=hunter2").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("secret_key"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(matches!(err, Error::InvalidInput { .. }));
    }

    #[test]
    fn bad_forms() {
        assert!(parse("dynamo://locks").is_err());
        assert!(parse("dynamodb://locks?max_clock_skew=soon").is_err());
        assert!(parse("dynamodb://locks?create_table=maybe").is_err());
        assert!(parse("dynamodb://locks?endpoint=%zz").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("x"), None);
    }
}
