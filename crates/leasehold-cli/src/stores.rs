//! Opening any store by URL: the built-in ones (`sqlite:`, `memory:`) from
//! the library, each cloud store from its own crate, compiled in by a cargo
//! feature of this crate (`azblob`, `dynamodb`, `postgres`; all on by
//! default). A build
//! without one still recognises its URLs and says what is missing.
//!
//! Store URLs may carry secrets (an Azure SAS in the query, `user:pw@` in
//! the authority, a token parameter): [`redact`] and [`scrub`] are the one
//! place that removes them from anything printed.

use anyhow::Context;
use leasehold::{Error, Store};

/// What a command does with the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Takes leases (`run`, `elect`): a missing SQLite file is created.
    Lease,
    /// Only looks or breaks (`status`, `list`, `break`, `leader`): a missing
    /// SQLite file is never created. An explicit path that does not exist
    /// is an error (it is most likely mistyped); the default file not
    /// existing yet means no lease was ever taken in it.
    Look,
}

/// Opens `url`, or the default SQLite file when none is given, for any
/// use (a tool's own `memory:` store included).
///
/// # Errors
/// As [`Store::open`], and the cloud backends' URL and credential errors;
/// the message names the URL without its secrets.
pub async fn open(url: Option<&str>) -> anyhow::Result<Store> {
    let url = url.unwrap_or("sqlite:");
    let opened = match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("azblob") => open_azblob(url).await,
        Some("dynamodb") => open_dynamodb(url).await,
        Some("postgres" | "postgresql") => open_postgres(url).await,
        _ => Store::open(url),
    };
    opened.with_context(|| format!("cannot open store {}", redact(url)))
}

/// Opens `url`, or the default SQLite file when none is given, as the
/// `leasehold` command does: for `access`, refusing stores that no other
/// process can see.
///
/// # Errors
/// As [`Store::open`], and the cloud backends' URL and credential errors;
/// `memory:` and in-memory SQLite URLs, which would give a lock that no
/// other process sees; with [`Access::Look`], an explicit SQLite path that
/// does not exist. Messages never carry the URL's secrets.
pub async fn open_with(url: Option<&str>, access: Access) -> anyhow::Result<Store> {
    let url = url.unwrap_or("sqlite:");
    let opened = open_url(url, access).await;
    opened.with_context(|| format!("cannot open store {}", redact(url)))
}

async fn open_url(url: &str, access: Access) -> leasehold::Result<Store> {
    if url.trim().is_empty() {
        // Most likely `--store "$UNSET"`: falling back to the local default
        // would give a lock that other machines do not see.
        return Err(Error::invalid(
            "store URL",
            "it is empty (--store or LEASEHOLD_STORE set to nothing); unset it for the default SQLite file, or give sqlite:PATH, azblob://CONTAINER[/PREFIX], dynamodb://TABLE or postgres://USER@HOST/DB",
        ));
    }
    if let Some(path) = leasehold::sqlite_url_path(url) {
        let rest = &url["sqlite:".len()..];
        if is_in_memory_sqlite(rest) {
            return Err(private_store(url));
        }
        let path = path?;
        if access == Access::Look && !path.exists() {
            if rest.is_empty() {
                // The default file: no lease was ever taken in it. An empty
                // store answers the same, without creating anything.
                return Store::open("memory:");
            }
            return Err(Error::invalid(
                "store URL",
                format!(
                    "there is no SQLite store at {} (is the path mistyped? `leasehold run` creates it on first use)",
                    path.display()
                ),
            ));
        }
        return Store::open(url);
    }
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("azblob") => open_azblob(url).await,
        Some("dynamodb") => open_dynamodb(url).await,
        Some("postgres" | "postgresql") => open_postgres(url).await,
        _ if url == "memory:" => Err(private_store(url)),
        _ => Store::open(url),
    }
}

/// `:memory:`, or a `file:` URI naming an in-memory database: SQLite opens
/// those as a database private to the connection.
fn is_in_memory_sqlite(path: &str) -> bool {
    path == ":memory:"
        || path
            .strip_prefix("file:")
            .is_some_and(|uri| uri.starts_with(":memory:") || uri.contains("mode=memory"))
}

fn private_store(url: &str) -> Error {
    Error::invalid(
        "store URL",
        format!(
            "{url} is a store private to this one process: a lock in it excludes nobody else; use sqlite:PATH (one machine) or a cloud store"
        ),
    )
}

#[cfg(feature = "azblob")]
async fn open_azblob(url: &str) -> leasehold::Result<Store> {
    Ok(Store::new(
        leasehold_azure::AzureBackend::from_url(url).await?,
    ))
}

#[cfg(not(feature = "azblob"))]
async fn open_azblob(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("azblob"))
}

#[cfg(feature = "dynamodb")]
async fn open_dynamodb(url: &str) -> leasehold::Result<Store> {
    Ok(Store::new(
        leasehold_dynamodb::DynamoDbBackend::from_url(url).await?,
    ))
}

#[cfg(not(feature = "dynamodb"))]
async fn open_dynamodb(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("dynamodb"))
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str) -> leasehold::Result<Store> {
    Ok(Store::new(
        leasehold_postgres::PostgresBackend::from_url(url).await?,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("postgres"))
}

#[cfg(not(all(feature = "azblob", feature = "dynamodb", feature = "postgres")))]
fn not_in_build(scheme: &str) -> leasehold::Error {
    leasehold::Error::NotSupported(format!(
        "this leasehold was built without the {scheme}:// store (cargo feature \"{scheme}\")"
    ))
}

/// The URL without anything that may be secret: the user info of its
/// authority (`user:pw@`), its query string and fragment are replaced by
/// `***`.
pub fn redact(url: &str) -> String {
    let (before_query, had_query) = match url.find(['?', '#']) {
        Some(i) => (&url[..i], true),
        None => (url, false),
    };
    let mut out = match before_query.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
                None => before_query.to_string(),
            }
        }
        None => before_query.to_string(),
    };
    if had_query {
        out.push_str("?***");
    }
    out
}

/// `text` with every secret part of `url` removed: the URL itself (shown
/// redacted), its query string, user info, and each query value and user
/// info part, raw or percent-decoded. Everything the CLI prints about a
/// failure passes through here.
pub fn scrub(text: &str, url: Option<&str>) -> String {
    let Some(url) = url else {
        return text.to_string();
    };
    let mut out = text.replace(url, &redact(url));
    for secret in secrets_of(url) {
        if secret.len() >= 3 {
            out = out.replace(&secret, "***");
        }
    }
    out
}

/// The parts of `url` that may be secret, longest first.
fn secrets_of(url: &str) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(i) = url.find(['?', '#']) {
        let query = &url[i + 1..];
        parts.push(query.to_string());
        for pair in query.split(['&', ';', '#']) {
            match pair.split_once('=') {
                // Known settings that carry no secret stay readable in
                // messages ("region us-east-1"); an endpoint's own user
                // info and query do not.
                Some((
                    "region" | "profile" | "max_clock_skew" | "create_table" | "table" | "sslmode"
                    | "max_ttl",
                    _,
                )) => {}
                Some(("endpoint", v)) => {
                    let endpoint = percent_decode(v).unwrap_or_else(|| v.to_string());
                    if endpoint.contains(['@', '?', '#']) {
                        parts.push(v.to_string());
                        parts.extend(secrets_of(&endpoint));
                    }
                }
                Some((_, v)) => parts.push(v.to_string()),
                None => parts.push(pair.to_string()),
            }
        }
    }
    if let Some((_, rest)) = url.split_once("://") {
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            parts.push(userinfo.to_string());
            match userinfo.split_once(':') {
                // A PostgreSQL user name is no secret, and redacting it
                // (often "postgres") would mangle every message.
                Some((_, password)) if is_postgres(url) => parts.push(password.to_string()),
                _ => parts.extend(userinfo.split(':').map(str::to_string)),
            }
        }
    }
    let decoded: Vec<String> = parts.iter().filter_map(|p| percent_decode(p)).collect();
    parts.extend(decoded);
    parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
    parts.dedup();
    parts
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Percent-decoding for matching decoded secrets in messages (no crate for
/// a dozen lines; `None` if it decodes to nothing different).
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains(['%', '+']) {
        return None;
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 3 <= bytes.len() && s.is_char_boundary(i + 3) => {
                match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                    Ok(b) => out.push(b),
                    Err(_) => return None,
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_userinfo_query_and_fragment() {
        assert_eq!(redact("azblob://c?sv=1&sig=abc"), "azblob://c?***");
        assert_eq!(redact("azblob://user:pw@c/p"), "azblob://***@c/p");
        assert_eq!(
            redact("dynamodb://t?region=x&token=s3cr3t"),
            "dynamodb://t?***"
        );
        assert_eq!(redact("sqlite:/tmp/a.db"), "sqlite:/tmp/a.db");
        assert_eq!(redact("x://a@b#frag"), "x://***@b?***");
    }

    #[test]
    fn scrub_removes_every_secret_part_raw_or_decoded() {
        let url = "azblob://me:pa%2Fss@c?sig=abc%2Bdef&sv=2020";
        let text =
            format!("cannot open {url}: \"{url}\" is bad; sig abc+def, also abc%2Bdef, pass pa/ss");
        let s = scrub(&text, Some(url));
        for secret in ["abc", "pa/ss", "pa%2Fss", "me:"] {
            assert!(!s.contains(secret), "{secret} in {s}");
        }
        assert!(s.contains("azblob://***@c?***"), "{s}");
    }

    #[test]
    fn settings_that_are_no_secret_stay_readable() {
        let url =
            "dynamodb://t?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000&token=S3CRET";
        let s = scrub(
            "region us-east-1, endpoint http://127.0.0.1:8000, S3CRET",
            Some(url),
        );
        assert_eq!(s, "region us-east-1, endpoint http://127.0.0.1:8000, ***");
        let url = "dynamodb://t?endpoint=http%3A%2F%2Fme%3APW123%40h%3A1";
        let s = scrub("endpoint http://me:PW123@h:1 refused", Some(url));
        assert!(!s.contains("PW123"), "{s}");
    }

    #[test]
    fn postgres_passwords_are_scrubbed_but_not_user_names() {
        let url = "postgres://postgres:pa%40ss99@127.0.0.1:5432/db?table=t&sslmode=require";
        let s = scrub(
            "postgres backend failed for postgres: pa@ss99 pa%40ss99; table t, sslmode require",
            Some(url),
        );
        assert_eq!(
            s,
            "postgres backend failed for postgres: *** ***; table t, sslmode require"
        );
        assert_eq!(redact(url), "postgres://***@127.0.0.1:5432/db?***");
    }

    #[test]
    fn in_memory_sqlite_is_recognised() {
        assert!(is_in_memory_sqlite(":memory:"));
        assert!(is_in_memory_sqlite("file::memory:?cache=shared"));
        assert!(is_in_memory_sqlite("file:x?mode=memory"));
        assert!(!is_in_memory_sqlite("/tmp/memory.db"));
    }
}
