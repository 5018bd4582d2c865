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
    let mut first = env.spawn(&sh("run lost/k --wait 60s --ttl 15s", TREE));
    let (first_token, pids) = token_and_pids(&mut first);

    // The second command looks for the first one's processes as soon as it
    // starts, then prints its own token.
    let check = tree_check(pids);
    // Warnings on: the store's new epoch is logged when first seen.
    let mut second = piped(env.leasehold().env("RUST_LOG", "leasehold=warn").args([
        "run", "lost/k", "--wait", "120s", "--ttl", "15s", "--", "sh", "-c", &check,
    ]));
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
    assert_new_token_and_no_tree(&stdout, first_token, "container");
    assert!(
        stderr.contains("new store epoch"),
        "the second run met the new container's epoch (and its quarantine): {stderr}"
    );
}
