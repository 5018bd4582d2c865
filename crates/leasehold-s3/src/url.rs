//! Parsing `s3://BUCKET[/PREFIX]?region=…&endpoint=…` store URLs.

use leasehold::backend::params::QuerySpec;
use leasehold::{Error, Result};
use leasehold_aws::parse_store_url;

use crate::builder::S3BackendBuilder;
use crate::S3Backend;

const WHAT: &str = "store URL";
const FORM: &str = "the form is s3://BUCKET[/PREFIX]?region=REGION&endpoint=URL&profile=NAME&max_ttl=DURATION&create_bucket=true|false, every parameter optional";
/// The query parameters of an `s3://` URL.
const PARAMS: QuerySpec = QuerySpec::new(
    "s3",
    &["region", "endpoint", "profile", "max_ttl", "create_bucket"],
);

impl S3Backend {
    /// Opens `s3://BUCKET[/PREFIX]?region=…&endpoint=…&profile=…&max_ttl=…&create_bucket=…`
    /// (see the [crate docs](crate#store-url)): loads the AWS configuration,
    /// then checks the bucket (creating it if missing and allowed) and reads
    /// the store's epoch.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL, bucket name, prefix,
    /// region or endpoint (naming what is wrong, never repeating a possible
    /// secret); [`Error::Backend`] when S3 cannot be reached or refuses the
    /// credentials.
    pub async fn from_url(url: &str) -> Result<S3Backend> {
        Self::builder_from_url(url)?.build().await
    }

    /// The builder [`from_url`](Self::from_url) builds, for setting more
    /// before building (such as [`creation`](S3BackendBuilder::creation)).
    ///
    /// # Errors
    /// As [`from_url`](Self::from_url), for the URL's form.
    ///
    /// Nothing is contacted yet. Error messages name the offending parameter
    /// but never repeat values that could be secret (only the bucket,
    /// prefix, region and endpoint are echoed, and an endpoint carrying user
    /// info is refused without being repeated).
    pub fn builder_from_url(url: &str) -> Result<S3BackendBuilder> {
        let (path, query) = parse_store_url(url, &PARAMS, "an S3 store URL", FORM)?;
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(Error::invalid(
                WHAT,
                format!("the URL names no bucket; {FORM}"),
            ));
        }
        let mut builder = S3BackendBuilder::new(bucket).prefix(prefix);
        builder.options.read_query(&query, "create_bucket")?;
        Ok(builder)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn parses_every_parameter() {
        let b = S3Backend::builder_from_url("s3://locks/jobs/prod?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A45399&profile=dev&max_ttl=5m&create_bucket=false").unwrap();
        assert_eq!(b.bucket, "locks");
        assert_eq!(b.prefix, "jobs/prod");
        let names = (
            Some("eu-west-1"),
            Some("http://127.0.0.1:45399"),
            Some("dev"),
        );
        assert_eq!(b.options.aws.names(), names);
        assert_eq!(b.options.max_ttl, Duration::from_secs(300));
        assert!(!b.options.create);
    }

    #[test]
    fn bare_bucket() {
        let b = S3Backend::builder_from_url("s3://locks").unwrap();
        assert_eq!(b.bucket, "locks");
        assert_eq!(b.prefix, "");
        let b = S3Backend::builder_from_url("s3://locks/").unwrap();
        assert_eq!(b.prefix, "");
        assert!(b.options.aws.region.is_none() && b.options.aws.endpoint.is_none());
    }

    #[test]
    fn bad_forms_are_named_not_echoed() {
        assert!(S3Backend::builder_from_url("s4://locks").is_err());
        assert!(S3Backend::builder_from_url("s3://").is_err());
        assert!(S3Backend::builder_from_url("s3:///prefix").is_err());
        assert!(S3Backend::builder_from_url("s3://locks?max_ttl=3").is_err());
        assert!(S3Backend::builder_from_url("s3://locks?create_bucket=maybe").is_err());
        let err = S3Backend::builder_from_url("s3://locks?secret_key=hunter2").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("secret_key") && !text.contains("hunter2"),
            "{text}"
        );
        let err = S3Backend::builder_from_url("s3://locks?region=a&region=b").unwrap_err();
        assert!(err.to_string().contains("more than once"), "{err}");
    }
}
