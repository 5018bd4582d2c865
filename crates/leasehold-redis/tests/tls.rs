//! `rediss://`: TLS to a real Redis server (started here with a private CA
//! made by rcgen), with the certificate chain and the host name verified.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold::backend::Backend;
use leasehold_redis::RedisBackendBuilder;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

const PASSWORD: &str = "tls-test-pw-77aa";

/// A TLS-only Redis server whose certificate names `localhost` (not
/// 127.0.0.1), signed by a CA written to `dir/ca.pem`.
struct TlsServer {
    port: u16,
    _child: tokio::process::Child,
}

async fn start(dir: &Path) -> Option<TlsServer> {
    if std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        return leasehold_testkit::conformance::skip(
            "redis",
            "redis-server is not installed (scripts/redis.sh start installs it)",
        );
    }
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--tls-port")
        .arg(port.to_string())
        .arg("--tls-cert-file")
        .arg(dir.join("server.pem"))
        .arg("--tls-key-file")
        .arg(dir.join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(dir.join("ca.pem"))
        .args(["--tls-auth-clients", "no", "--requirepass", PASSWORD])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Ready when it accepts TCP connections on the TLS port.
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(TlsServer {
                port,
                _child: child,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the TLS Redis server did not start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_verifies_chain_and_host_name() {
    let dir = tempdir();
    let Some(server) = start(&dir).await else {
        return;
    };
    let ca = dir.join("ca.pem");
    let url = |host: &str, ca: Option<&Path>| {
        let mut url = format!("rediss://:{PASSWORD}@{host}:{}/0?max_ttl=5s", server.port);
        if let Some(ca) = ca {
            url.push_str(&format!("&tls_ca={}", ca.display()));
        }
        url
    };
    let open = |url: String| async move {
        RedisBackendBuilder::from_url(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(2))
            .build()
            .await
    };

    // The right CA and host name: leases work over TLS.
    let backend = open(url("localhost", Some(&ca))).await.unwrap();
    let lease =
        leasehold_testkit::conformance::raw_lease(&backend, "tls/job", Duration::from_secs(2))
            .await;
    backend.renew(&lease).await.unwrap();
    backend.release(&lease).await.unwrap();

    // The system's roots do not know the private CA.
    let err = open(url("localhost", None)).await.unwrap_err();
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    // The certificate names localhost, not 127.0.0.1.
    let err = open(url("127.0.0.1", Some(&ca))).await.unwrap_err();
    assert!(err.to_string().contains("not valid for name"), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    // A plain-text client is not let in either.
    let plain = open(url("localhost", None).replacen("rediss://", "redis://", 1)).await;
    assert!(plain.is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-redis-tls-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
