//! Parsing `dynamodb://TABLE?region=…&endpoint=…` store URLs.

use leasehold::backend::params::QuerySpec;
use leasehold::Result;
use leasehold_aws::parse_store_url;

use crate::builder::DynamoDbBackendBuilder;
use crate::{DynamoDbBackend, TakeoverMode};

const FORM: &str = "the form is dynamodb://TABLE?region=REGION&endpoint=URL&profile=NAME&max_clock_skew=DURATION&max_ttl=DURATION&create_table=true|false, every parameter optional";
/// The query parameters of a `dynamodb://` URL.
const PARAMS: QuerySpec = QuerySpec::new(
    "dynamodb",
    &[
        "region",
        "endpoint",
        "profile",
        "max_clock_skew",
        "max_ttl",
        "create_table",
    ],
);

impl DynamoDbBackend {
    /// Opens `dynamodb://TABLE?region=…&endpoint=…&profile=…&max_clock_skew=…&create_table=…`
    /// (see the [crate docs](crate#store-url)): loads the AWS configuration,
    /// then checks the table or creates it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a
    /// malformed URL, table name, region or endpoint (naming what is wrong,
    /// never repeating a possible secret);
    /// [`Error::Backend`](leasehold::Error::Backend) when DynamoDB cannot be
    /// reached or refuses the credentials.
    ///
    /// # Cancel safety
    /// As [`DynamoDbBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<DynamoDbBackend> {
        Self::builder_from_url(url)?.build().await
    }

    /// The builder [`from_url`](Self::from_url) builds, for setting more
    /// before building (such as [`creation`](DynamoDbBackendBuilder::creation)).
    ///
    /// # Errors
    /// As [`from_url`](Self::from_url), for the URL's form.
    ///
    /// Nothing is contacted yet. Error messages name the offending parameter
    /// but never repeat values that could be secret (only the table name,
    /// region and endpoint are echoed, and an endpoint carrying user info is
    /// refused without being repeated).
    pub fn builder_from_url(url: &str) -> Result<DynamoDbBackendBuilder> {
        let (table, query) = parse_store_url(url, &PARAMS, "a DynamoDB store URL", FORM)?;
        let table = table.strip_suffix('/').unwrap_or(table);
        let mut builder = DynamoDbBackendBuilder::new(table);
        if let Some(max_skew) = query.duration("max_clock_skew")? {
            builder = builder.takeover(TakeoverMode::TrustClocks { max_skew });
        }
        builder.options.read_query(&query, "create_table")?;
        Ok(builder)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use leasehold::Error;

    #[test]
    fn a_repeated_parameter_is_an_error_not_an_override() {
        let Err(err) =
            DynamoDbBackend::builder_from_url("dynamodb://locks?region=eu-west-1&region=us-east-1")
        else {
            panic!("a repeated region was accepted");
        };
        let text = err.to_string();
        assert!(
            text.contains("\"region\" is given more than once"),
            "{text}"
        );
        assert!(
            text.contains("the dynamodb store's parameters are region, endpoint, profile, max_clock_skew, max_ttl and create_table"),
            "{text}"
        );
    }

    #[test]
    fn parses_every_parameter() {
        let b = DynamoDbBackend::builder_from_url("dynamodb://locks?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000&profile=dev&max_clock_skew=2s&create_table=false").unwrap();
        assert_eq!(b.table, "locks");
        let names = (
            Some("eu-west-1"),
            Some("http://127.0.0.1:8000"),
            Some("dev"),
        );
        assert_eq!(b.options.aws.names(), names);
        assert_eq!(
            b.takeover,
            TakeoverMode::TrustClocks {
                max_skew: Duration::from_secs(2)
            }
        );
        assert!(!b.options.create);
        let b = DynamoDbBackend::builder_from_url("dynamodb://locks?max_ttl=5m").unwrap();
        assert_eq!(b.options.max_ttl, Duration::from_secs(300));
    }

    #[test]
    fn unencoded_endpoint_and_bare_table() {
        let b = DynamoDbBackend::builder_from_url(
            "dynamodb://locks?endpoint=http://127.0.0.1:8000&region=us-east-1",
        )
        .unwrap();
        assert_eq!(
            b.options.aws.endpoint.as_deref(),
            Some("http://127.0.0.1:8000")
        );
        let b = DynamoDbBackend::builder_from_url("dynamodb://locks").unwrap();
        assert_eq!(b.table, "locks");
        assert!(b.options.aws.region.is_none() && b.options.aws.endpoint.is_none());
        assert_eq!(b.takeover, TakeoverMode::Observe);
    }

    #[test]
    fn unknown_parameters_are_named_not_echoed() {
        let err =
            DynamoDbBackend::builder_from_url("dynamodb://locks?secret_key=hunter2").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("secret_key"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(matches!(err, Error::InvalidInput { .. }));
    }

    #[test]
    fn bad_forms() {
        assert!(DynamoDbBackend::builder_from_url("dynamo://locks").is_err());
        assert!(DynamoDbBackend::builder_from_url("dynamodb://locks?max_clock_skew=soon").is_err());
        assert!(DynamoDbBackend::builder_from_url("dynamodb://locks?create_table=maybe").is_err());
        assert!(DynamoDbBackend::builder_from_url("dynamodb://locks?endpoint=%zz").is_err());
    }

    #[test]
    fn durations_need_a_unit() {
        let b = DynamoDbBackend::builder_from_url(
            "dynamodb://locks?max_clock_skew=1m30s&max_ttl=250ms",
        )
        .unwrap();
        assert_eq!(
            b.takeover,
            TakeoverMode::TrustClocks {
                max_skew: Duration::from_secs(90)
            }
        );
        assert_eq!(b.options.max_ttl, Duration::from_millis(250));
        // A bare number was seconds before the grammar became humantime's.
        assert!(DynamoDbBackend::builder_from_url("dynamodb://locks?max_ttl=3").is_err());
    }

    #[test]
    fn create_table_takes_the_common_booleans() {
        for (text, want) in [("yes", true), ("off", false), ("0", false)] {
            let b =
                DynamoDbBackend::builder_from_url(&format!("dynamodb://locks?create_table={text}"))
                    .unwrap();
            assert_eq!(b.options.create, want, "{text}");
        }
    }
}
