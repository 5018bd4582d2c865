//! How each holder reaches the store: directly, or through a fault proxy.

use std::net::SocketAddr;

use anyhow::Context;

use crate::proxy::FaultProxy;

/// How one holder reaches the store: directly, or through its fault proxy.
#[derive(Clone)]
pub struct Route {
    pub url: String,
    pub env: Vec<(String, String)>,
    pub proxy: Option<FaultProxy>,
}

/// The environment's Azure connection string, or Azurite's development
/// account on its default port.
fn azure_connection_string() -> String {
    match std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        Ok(cs)
            if !cs.trim().eq_ignore_ascii_case("UseDevelopmentStorage=true") && !cs.is_empty() =>
        {
            cs
        }
        _ => leasehold_azure::dev_connection_string(10000),
    }
}

impl Route {
    pub fn direct(store: &str) -> Route {
        Route {
            url: store.to_string(),
            env: Vec::new(),
            proxy: None,
        }
    }

    /// The store's URL and environment with `upstream` replaced by the proxy.
    pub fn through(store: &str, upstream: SocketAddr, proxy: FaultProxy) -> anyhow::Result<Route> {
        let (from, to) = (upstream.to_string(), proxy.addr.to_string());
        let mut route = Route {
            url: store.replace(&from, &to),
            env: Vec::new(),
            proxy: Some(proxy),
        };
        if store.starts_with("azblob://") {
            route.env.push((
                "AZURE_STORAGE_CONNECTION_STRING".into(),
                azure_connection_string().replace(&from, &to),
            ));
        }
        Ok(route)
    }
}

/// The loopback address a network store is reached at.
pub fn upstream(store: &str) -> anyhow::Result<SocketAddr> {
    let authority = if store.starts_with("azblob://") {
        let cs = azure_connection_string();
        let endpoint = cs
            .split(';')
            .find_map(|kv| kv.strip_prefix("BlobEndpoint="))
            .context("the connection string has no BlobEndpoint")?
            .to_string();
        authority_of(&endpoint)
    } else if store.starts_with("dynamodb://") || store.starts_with("s3://") {
        let query = store.split_once('?').map(|(_, q)| q).unwrap_or("");
        let endpoint = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("endpoint="))
            .context("the store URL has no endpoint=")?;
        anyhow::ensure!(
            !endpoint.contains('%'),
            "give the endpoint unencoded for the fault proxy"
        );
        authority_of(endpoint)
    } else if store.starts_with("postgres://")
        || store.starts_with("postgresql://")
        || store.starts_with("mysql://")
        || store.starts_with("mariadb://")
        || store.starts_with("redis://")
        || store.starts_with("zk://")
        || store.starts_with("etcd://")
    {
        // (An etcd URL names one endpoint here: the proxy stands for one
        // server.)
        let authority = authority_of(store);
        let host = authority
            .rsplit_once('@')
            .map(|(_, h)| h)
            .unwrap_or(&authority);
        anyhow::ensure!(
            host.contains(':'),
            "give the store URL a port for the fault proxy"
        );
        host.split('?').next().unwrap_or(host).to_string()
    } else {
        anyhow::bail!("{} is not reached over TCP", redact(store))
    };
    let addr: SocketAddr = authority
        .parse()
        .with_context(|| format!("{authority} is not IP:PORT"))?;
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "fault injection targets loopback only, not {addr}"
    );
    Ok(addr)
}

fn authority_of(endpoint: &str) -> String {
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(endpoint);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The URL without its user info and query string (which may carry
/// credentials: a Redis, PostgreSQL or MySQL password, an Azure SAS).
pub fn redact(url: &str) -> String {
    leasehold_stores::redact(url)
        .trim_end_matches("?***")
        .to_string()
}
