//! The two binaries: `leasehold` links every store but the cloud stores,
//! and runs `leasehold-cloud` (every store) in its own place for a cloud
//! store's URL.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

const LEASEHOLD: &str = env!("CARGO_BIN_EXE_leasehold");
const CLOUD: &str = env!("CARGO_BIN_EXE_leasehold-cloud");

/// The number of `binary`'s symbols from each crate of `crates`.
fn symbols_from(binary: &str, crates: &[&str]) -> Vec<usize> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let names: Vec<&str> = file.symbols().filter_map(|s| s.name().ok()).collect();
    assert!(!names.is_empty(), "{binary} has no symbol table");
    // Mangled names hold each crate's name, its length before it.
    crates
        .iter()
        .map(|c| format!("{}{c}", c.len()))
        .map(|c| names.iter().filter(|n| n.contains(&c)).count())
        .collect()
}

#[test]
fn leasehold_links_no_cloud_store_and_leasehold_cloud_links_them_all() {
    let cloud = ["leasehold_azure", "leasehold_dynamodb", "leasehold_s3"];
    assert_eq!(symbols_from(LEASEHOLD, &cloud), [0, 0, 0], "{LEASEHOLD}");
    let linked = symbols_from(CLOUD, &cloud);
    assert!(linked.iter().all(|n| *n > 0), "{CLOUD}: {linked:?}");
    // Both have the stores that stay in `leasehold`.
    let local = ["leasehold_postgres", "leasehold_redis", "leasehold_etcd"];
    for binary in [LEASEHOLD, CLOUD] {
        let found = symbols_from(binary, &local);
        assert!(found.iter().all(|n| *n > 0), "{binary}: {found:?}");
    }
}

/// `leasehold` and `leasehold-cloud` copied into a directory of their own
/// (`leasehold` alone without `with_cloud`).
fn installed(with_cloud: bool) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let leasehold = dir.path().join("leasehold");
    std::fs::copy(LEASEHOLD, &leasehold).unwrap();
    if with_cloud {
        std::fs::copy(CLOUD, dir.path().join("leasehold-cloud")).unwrap();
    }
    (dir, leasehold)
}

fn output(bin: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin)
        .args(args)
        .env_remove("LEASEHOLD_STORE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `bin` with `args` started, its stderr piped (test credentials for S3).
fn spawned(bin: &Path, args: &[&str]) -> std::process::Child {
    Command::new(bin)
        .args(args)
        .env_remove("LEASEHOLD_STORE")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_cloud_store_url_gets_the_answer_leasehold_cloud_gives() {
    let (_dir, leasehold) = installed(true);
    // Refused by each cloud store's own URL parser, before any request.
    for url in [
        "s3://b?region=us-east-1",
        "dynamodb://t?region=us-east-1&endpoint=notaurl",
        "azblob://Not_A_Container",
    ] {
        let args = ["--store", url, "status", "k"];
        let through = output(&leasehold, &args);
        let direct = output(Path::new(CLOUD), &args);
        assert_eq!(through, direct, "{url}");
        assert_eq!(through.0, Some(2), "{url}: {through:?}");
        assert!(!through.2.contains("does not link"), "{url}: {through:?}");
    }
}

#[test]
fn leasehold_becomes_leasehold_cloud_in_the_same_process() {
    let (_dir, leasehold) = installed(true);
    // An S3 endpoint that accepts and never answers: the process waits in
    // its first request, which only leasehold-cloud can send.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = format!("s3://leasehold-bucket?region=us-east-1&endpoint=http://127.0.0.1:{port}");
    let given = ["--store", &url, "--connect-timeout", "60s", "status", "k"];
    let child = spawned(&leasehold, &given);
    let pid = child.id();
    // Should the process end without sending anything, a connection of
    // this thread's says so (and the test fails instead of waiting).
    let ended = std::thread::spawn(move || {
        let out = child.wait_with_output().unwrap();
        let _ = std::net::TcpStream::connect(("127.0.0.1", port));
        out
    });
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut request = [0u8; 64];
    let n = conn.read(&mut request).unwrap_or(0);
    // The spawned process (same pid) now runs the other binary, with the
    // same command line.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    // SAFETY: a plain kill(2) of the child this test spawned, not yet
    // reaped (its waiter is blocked in wait until it ends).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let out = ended.join().unwrap();
    assert!(
        n > 0,
        "no request; the process ended: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = exe.unwrap();
    assert_eq!(exe.file_name().unwrap(), "leasehold-cloud", "{exe:?}");
    let mut expected = vec![leasehold.as_os_str().as_encoded_bytes()];
    expected.extend(given.iter().map(|a| a.as_bytes()));
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    assert_eq!(args, expected);
    assert!(
        request[..n].starts_with(b"GET ")
            || request[..n].starts_with(b"PUT ")
            || request[..n].starts_with(b"HEAD "),
        "{:?}",
        String::from_utf8_lossy(&request[..n])
    );
}

#[test]
fn without_leasehold_cloud_beside_it_leasehold_says_so_and_still_opens_the_other_stores() {
    let (dir, leasehold) = installed(false);
    let (code, _, stderr) = output(&leasehold, &["--store", "s3://my-bucket", "status", "k"]);
    assert_eq!(code, Some(2), "{stderr}");
    let cloud = dir.path().join("leasehold-cloud");
    assert!(
        stderr.contains(&format!("cannot run {}", cloud.display()))
            && stderr.contains("No such file")
            && stderr.contains("s3://"),
        "{stderr}"
    );
    // The URL's secrets stay out of the message.
    let (_, _, stderr) = output(
        &leasehold,
        &[
            "--store",
            "s3://my-bucket?secret_key=hunter2",
            "status",
            "k",
        ],
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    // A local store needs no other binary.
    let db = dir.path().join("leases.db");
    let store = format!("sqlite:{}", db.display());
    let (code, stdout, stderr) = output(
        &leasehold,
        &["--store", &store, "run", "k", "--", "echo", "ran"],
    );
    assert_eq!((code, stdout.as_str()), (Some(0), "ran\n"), "{stderr}");
}

#[test]
fn a_copy_of_leasehold_under_leasehold_clouds_name_is_refused_not_run_for_ever() {
    let dir = tempfile::tempdir().unwrap();
    let leasehold = dir.path().join("leasehold");
    std::fs::copy(LEASEHOLD, &leasehold).unwrap();
    std::fs::copy(LEASEHOLD, dir.path().join("leasehold-cloud")).unwrap();
    let child = spawned(&leasehold, &["--store", "s3://my-bucket", "status", "k"]);
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
    // Each exec takes a few milliseconds: a loop would still run then.
    let out = match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => out,
        Err(_) => {
            // SAFETY: a plain kill(2) of the child this test spawned, not
            // yet reaped (its waiter is blocked in wait).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("leasehold kept running itself");
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no cloud store either"), "{stderr}");
}

#[test]
fn the_command_run_by_leasehold_cloud_does_not_see_leaseholds_mark() {
    // leasehold-cloud removes the variable leasehold sets for it: what it
    // runs sees the environment leasehold was given.
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("leases.db").display());
    let out = Command::new(CLOUD)
        .args(["--store", &store, "run", "k", "--", "env"])
        .env("LEASEHOLD_RAN_CLOUD_BINARY", "1")
        .env_remove("LEASEHOLD_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("PATH="), "{stdout}");
    assert!(!stdout.contains("LEASEHOLD_RAN_CLOUD_BINARY"), "{stdout}");
}
