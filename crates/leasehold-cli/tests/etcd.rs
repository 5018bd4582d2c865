//! `leasehold --store etcd://...`: real `leasehold` processes on a real
//! etcd server (scripts/test.sh starts one and runs these with
//! `--features etcd`; skipped, loudly, without the server or the feature).

#[cfg(not(feature = "etcd"))]
#[test]
fn etcd_tests_need_the_etcd_feature() {
    // Not a failure even under LEASEHOLD_REQUIRE_EMULATORS: the feature is
    // off by default (its build needs protoc); scripts/test.sh runs this
    // file again with `--features etcd`.
    eprintln!("SKIPPED etcd CLI tests: built without --features etcd");
}

#[cfg(feature = "etcd")]
mod common;

#[cfg(feature = "etcd")]
mod with_etcd {
    use std::time::Duration;

    use crate::common::*;

    const SECS: Duration = Duration::from_secs(1);

    /// Eight `leasehold run` processes on one key: their commands never
    /// overlap, all of them run, and their tokens grow.
    #[test]
    fn processes_on_etcd_take_turns_with_growing_tokens() {
        let Some(env) = Env::on("etcd") else {
            return;
        };
        // mkdir is atomic: it fails if another command is inside at the same time.
        let section = r#"mkdir "$D/inside" || exit 99
echo "$LEASEHOLD_FENCING_TOKEN" >> "$D/log"
sleep 0.05
rmdir "$D/inside""#;
        let mut children: Vec<_> = (0..8)
            .map(|_| {
                env.spawn(&[
                    "run", "--wait", "60s", "--ttl", "2s", "shared", "--", "sh", "-c", section,
                ])
            })
            .collect();
        for child in &mut children {
            assert_eq!(
                wait_with_timeout(child, 60 * SECS),
                Some(0),
                "a command overlapped another or failed"
            );
        }
        let log = std::fs::read_to_string(env.path("log")).unwrap();
        let tokens: Vec<u64> = log.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(tokens.len(), 8);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    }

    /// status, list and break see and end a lease held by another process;
    /// elect and leader agree on the leader.
    #[test]
    fn status_list_break_elect_and_leader_work_on_etcd() {
        let Some(env) = Env::on("etcd") else {
            return;
        };
        let script = "echo $LEASEHOLD_FENCING_TOKEN; exec sleep 300";
        let mut holder = env.spawn(&[
            "run",
            "--wait",
            "30s",
            "--ttl",
            "2s",
            "--owner",
            "etcd-holder",
            "jobs/a",
            "--",
            "sh",
            "-c",
            script,
        ]);
        let token: u64 = read_line(&mut stdout_reader(&mut holder)).parse().unwrap();
        let status = env.output(&["status", "jobs/a", "--json"]);
        assert_eq!(status.code, Some(0), "{status:?}");
        let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
        assert_eq!(json["holder"]["owner"]["label"], "etcd-holder", "{json}");
        assert_eq!(json["fencing_token"], token, "{json}");
        let list = env.output(&["list", "--prefix", "jobs/"]);
        assert_eq!(list.code, Some(0), "{list:?}");
        assert!(list.stdout.contains("jobs/a"), "{list:?}");
        let broke = env.output(&["break", "jobs/a"]);
        assert_eq!(broke.code, Some(0), "{broke:?}");
        assert_eq!(
            wait_with_timeout(&mut holder, 10 * SECS),
            Some(76),
            "a broken lease exits 76"
        );

        let mut leader = env.spawn(&[
            "elect",
            "--ttl",
            "2s",
            "--owner",
            "etcd-leader",
            "svc",
            "--",
            "sh",
            "-c",
            script,
        ]);
        let term: u64 = read_line(&mut stdout_reader(&mut leader)).parse().unwrap();
        let out = env.output(&["leader", "svc", "--json"]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(json["owner"]["label"], "etcd-leader", "{json}");
        assert_eq!(json["fencing_token"], term, "{json}");
        kill(leader.id(), libc::SIGTERM);
        wait_with_timeout(&mut leader, 10 * SECS);
    }

    /// A refused login prints neither the password nor the URL's user info.
    #[test]
    fn a_refused_password_is_never_printed() {
        let Some(env) = Env::on("etcd") else {
            return;
        };
        let url = env.url();
        let bad = url.replacen("://", "://someone:Wr0ngS3cretPw@", 1);
        let out = env
            .leasehold()
            .args(["status", "k"])
            .env("LEASEHOLD_STORE", &bad)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(!stderr.contains("Wr0ngS3cretPw"), "{stderr}");
        assert!(!stderr.contains("someone"), "{stderr}");
    }
}
