//! A TCP fault proxy between one holder and the storage emulator, on
//! loopback only. It forwards bytes both ways, and on command blackholes
//! them (a partition: connections stay open, nothing arrives), delays them,
//! or resets every open connection.
//!
//! Written here rather than taken from a crate: the proxies on crates.io are
//! either full HTTP proxies or test doubles without fault modes; this needs
//! forty lines of tokio.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const PASS: u8 = 0;
const BLACKHOLE: u8 = 1;

/// Handle on one running proxy.
#[derive(Clone)]
pub struct FaultProxy {
    pub addr: SocketAddr,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    resets: Arc<watch::Sender<u64>>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 (a free port) forwarding to `upstream`,
    /// which must be a loopback address.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only targets loopback"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = FaultProxy {
            addr: listener.local_addr()?,
            mode: Arc::default(),
            delay_ms: Arc::default(),
            resets: Arc::new(watch::channel(0).0),
        };
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let p = p.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        p.pipe(client, server).await;
                    }
                });
            }
        });
        Ok(proxy)
    }

    /// Drops every byte until [`heal`](Self::heal).
    pub fn blackhole(&self) {
        self.mode.store(BLACKHOLE, Ordering::SeqCst);
    }

    /// Forwards normally again, without delay.
    pub fn heal(&self) {
        self.mode.store(PASS, Ordering::SeqCst);
        self.delay_ms.store(0, Ordering::SeqCst);
    }

    /// Delays every chunk by `d`.
    pub fn delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// Resets (RST) every open connection.
    pub fn reset(&self) {
        self.resets.send_modify(|n| *n += 1);
    }

    async fn pipe(&self, client: TcpStream, server: TcpStream) {
        let mut resets = self.resets.subscribe();
        resets.borrow_and_update();
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let reset = tokio::select! {
            _ = self.forward(&mut cr, &mut sw) => false,
            _ = self.forward(&mut sr, &mut cw) => false,
            _ = resets.changed() => true,
        };
        if reset {
            // Linger 0: closing sends RST instead of FIN (and never blocks,
            // which is what the deprecation warns about).
            #[allow(deprecated)]
            if let (Ok(c), Ok(s)) = (cr.reunite(cw), sr.reunite(sw)) {
                let _ = c.set_linger(Some(Duration::ZERO));
                let _ = s.set_linger(Some(Duration::ZERO));
            }
        }
    }

    async fn forward(
        &self,
        from: &mut tokio::net::tcp::OwnedReadHalf,
        to: &mut tokio::net::tcp::OwnedWriteHalf,
    ) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if self.mode.load(Ordering::SeqCst) == BLACKHOLE {
                continue;
            }
            let delay = self.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, timeout: Duration) -> Option<Vec<u8>> {
        s.write_all(b"ping").await.ok()?;
        let mut b = [0u8; 4];
        match tokio::time::timeout(timeout, s.read_exact(&mut b)).await {
            Ok(Ok(_)) => Some(b.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwards_blackholes_heals_and_resets() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(
            roundtrip(&mut s, Duration::from_secs(5)).await.as_deref(),
            Some(&b"ping"[..])
        );
        proxy.blackhole();
        assert_eq!(
            roundtrip(&mut s, Duration::from_millis(200)).await,
            None,
            "blackholed"
        );
        proxy.heal();
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(
            roundtrip(&mut s, Duration::from_secs(5)).await.is_some(),
            "healed"
        );
        proxy.reset();
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .unwrap();
        assert!(
            matches!(r, Ok(0) | Err(_)),
            "reset closes the connection: {r:?}"
        );
    }
}
