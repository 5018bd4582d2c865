//! A store's table dumped with `pg_dump` and restored into another
//! PostgreSQL cluster (a new `initdb`), the documented way to move or
//! recover one: the restored table can get the same OID there (a fresh
//! cluster numbers its first tables alike), so the table's OID alone does
//! not tell that its data came from elsewhere. Tokens issued after the
//! dump must never be issued again from the restored table.

mod common;

use common::PrivateServer;
use leasehold_test_servers::admin_tool;
use leasehold_test_servers::suite::next_token as token;

async fn psql(server: &PrivateServer, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new("psql");
    cmd.arg(server.url().split('?').next().unwrap())
        .args(["-v", "ON_ERROR_STOP=1", "-Atq"])
        .args(args);
    admin_tool(cmd).await.trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_restored_into_another_cluster_never_repeats_a_token() {
    let (Some(old), Some(new)) = (PrivateServer::start().await, PrivateServer::start().await)
    else {
        return;
    };
    let on_old = leasehold_testkit::test_store(old.backend().await);
    let before_dump = token(&on_old).await;

    let dump = std::env::temp_dir().join(format!("leasehold-dump-{}.sql", old.port));
    let mut pg_dump = std::process::Command::new("pg_dump");
    pg_dump
        .arg(format!("--dbname={}", old.url().split('?').next().unwrap()))
        .args(["--no-owner", "--table", "leasehold_leases", "--file"])
        .arg(&dump);
    admin_tool(pg_dump).await;
    let after_dump = token(&on_old).await;
    assert!(after_dump > before_dump);

    psql(&new, &["-f", dump.to_str().unwrap()]).await;
    let _ = std::fs::remove_file(&dump);
    let oid = "SELECT 'leasehold_leases'::regclass::oid";
    let same_oid = psql(&old, &["-c", oid]).await == psql(&new, &["-c", oid]).await;

    let on_new = leasehold_testkit::test_store(new.backend().await);
    let restored = token(&on_new).await;
    assert!(
        restored > after_dump,
        "the restored table issued {restored}, not above {after_dump} (issued after the dump); \
         same table OID in both clusters: {same_oid}"
    );
}
