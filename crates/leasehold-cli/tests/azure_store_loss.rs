//! `leasehold run` on Azure when the container is deleted under a running
//! command while a second `leasehold run` waits for the key: the first
//! command's whole tree is stopped before the second command starts, and
//! the second command's fencing token is above the first one's (a new
//! store epoch). Real processes on Azurite (scripts/test.sh).

#![cfg(feature = "azblob")]

mod common;

use std::time::Duration;

use common::*;

#[test]
fn container_deleted_under_a_running_command() {
    let Some(env) = Env::on("azblob") else { return };
    // The container is new: the first holder waits out its quarantine.
    let mut first = env.spawn(&sh(
        "run lost/k --wait 60s --ttl 15s",
        "echo $LEASEHOLD_FENCING_TOKEN; sleep 300 & echo $!; echo $$; wait",
    ));
    let mut out = stdout_reader(&mut first);
    let first_token: u64 = read_line(&mut out).parse().expect("the first token");
    let pids: Vec<i32> = (0..2)
        .map(|_| read_line(&mut out).parse().expect("a pid"))
        .collect();
    std::thread::spawn(move || read_all(&mut out));

    // The second command looks for the first one's processes as soon as it
    // starts, then prints its own token.
    let check = format!(
        "for p in {} {}; do kill -0 $p 2>/dev/null && echo alive $p; done; echo $LEASEHOLD_FENCING_TOKEN",
        pids[0], pids[1]
    );
    // Warnings on: the store's new epoch is logged when first seen.
    let mut second = env
        .leasehold()
        .env("RUST_LOG", "leasehold=warn")
        .args([
            "run", "lost/k", "--wait", "120s", "--ttl", "15s", "--", "sh", "-c", &check,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut second_err = std::io::BufReader::new(second.stderr.take().unwrap());
    loop {
        let line = read_line(&mut second_err);
        assert!(!line.is_empty(), "the second run ended early");
        // Waiting: the key held, or (a process that meets the container
        // just as its quarantine ends) the last milliseconds of that first.
        if line.contains("waiting for lost/k: held by")
            || line.contains("waiting for lost/k: the store's data is new")
        {
            break;
        }
    }

    let url = env.url();
    let container = url
        .strip_prefix("azblob://")
        .and_then(|r| r.split(['?', '/']).next())
        .unwrap()
        .to_string();
    let cs = std::env::var("LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING").unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        leasehold_azure::AzureBackend::builder()
            .connection_string(cs)
            .container(container)
            .build()
            .unwrap()
            .delete_container()
            .await
            .unwrap();
    });

    // The first holder hears of the loss at its next renewal: exit 76.
    assert_eq!(
        wait_with_timeout(&mut first, Duration::from_secs(30)),
        Some(76)
    );
    let code = wait_with_timeout(&mut second, Duration::from_secs(120));
    let stdout = read_all(second.stdout.as_mut().unwrap());
    let stderr = read_all(&mut second_err);
    assert_eq!(code, Some(0), "{stdout} {stderr}");
    let mut lines = stdout.lines();
    let token: u64 = lines
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("the first command still ran when the second started: {stdout}"));
    assert!(
        token > first_token,
        "token {token} after the container was lost, {first_token} before"
    );
    assert!(
        stderr.contains("new store epoch"),
        "the second run met the new container's epoch (and its quarantine): {stderr}"
    );
    assert_eq!(
        lines.next(),
        None,
        "the first command's processes were gone: {stdout}"
    );
}
