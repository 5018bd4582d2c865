//! In-process micro-benchmarks (criterion): an uncontended acquire +
//! release on the memory and SQLite stores, and a same-process handoff.
//! `cargo bench -p leasehold-bench`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold::Store;

fn cycles(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("leasehold-micro-{}", std::process::id()));
    let sqlite =
        Store::open(&format!("sqlite:{}", dir.join("leases.db").display())).expect("sqlite");
    let memory = Store::open("memory:").expect("memory");
    for (name, store) in [("memory", memory), ("sqlite", sqlite)] {
        let lock = store.lock("micro").expect("lock");
        c.bench_function(&format!("{name}: try_acquire + release"), |b| {
            b.to_async(&rt).iter(|| async {
                let g = lock.try_acquire().await.expect("acquire");
                g.release().await.expect("release");
            })
        });
        c.bench_function(&format!("{name}: acquire(wait) + release"), |b| {
            b.to_async(&rt).iter(|| async {
                let g = lock
                    .acquire_timeout(Duration::from_secs(5))
                    .await
                    .expect("acquire");
                g.release().await.expect("release");
            })
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = micro;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).sample_size(20);
    targets = cycles
}
criterion_main!(micro);
