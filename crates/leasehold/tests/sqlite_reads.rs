//! Reads of the SQLite store (`inspect`, `list`) answer on the calling
//! thread when they need not wait (when they would, they go to the
//! blocking pool as before: `sqlite::open`'s unit tests).

use std::time::Duration;

use leasehold::Store;

/// A runtime whose blocking pool has one thread, as a test can fill it.
fn one_blocking_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap()
}

#[test]
fn reads_answer_while_the_blocking_pool_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("r.db").display());
    let rt = one_blocking_thread();
    rt.block_on(async {
        let store = Store::open(&url).unwrap();
        let held = store.lock("job").unwrap().try_acquire().await.unwrap();
        // The pool's one thread, kept busy until the reads are answered.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let busy = tokio::task::spawn_blocking(move || wait.recv());
        let reads = async {
            let info = store.inspect("job").await.unwrap();
            let listed = store.list("jo").await.unwrap();
            (info, listed)
        };
        let (info, listed) = tokio::time::timeout(Duration::from_secs(10), reads)
            .await
            .expect("the reads waited for the blocking pool");
        assert_eq!(
            info.holder.map(|h| h.fencing_token),
            Some(held.fencing_token())
        );
        assert_eq!(listed.len(), 1);
        done.send(()).unwrap();
        busy.await.unwrap().unwrap();
        held.release().await.unwrap();
    });
}
