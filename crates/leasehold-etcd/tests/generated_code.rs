//! The etcd gRPC code in `vendor/etcd/generated/` is committed, so that
//! building this crate needs no protobuf compiler. This test generates it
//! again from `vendor/etcd/proto/` (with protox, a protobuf compiler written in Rust,
//! and tonic's code generator) and fails when the committed files differ.
//!
//! To regenerate them after changing `vendor/etcd/proto/` or the generator's versions:
//!
//! ```text
//! LEASEHOLD_REGENERATE=1 cargo test -p leasehold-etcd --test generated_code
//! ```

use std::path::{Path, PathBuf};

/// The files `vendor/etcd/proto/` holds that the crate compiles (`kv.proto` and
/// `auth.proto` come in through `rpc.proto`'s imports).
const PROTOS: [&str; 2] = ["rpc.proto", "v3lock.proto"];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Generates the code into `out`: clients only (no servers), no transport
/// helpers (the crate builds its own channel).
fn generate(out: &Path) {
    let root = crate_dir().join("vendor/etcd/proto");
    let files = protox::compile(PROTOS, [&root]).expect("vendor/etcd/proto/ compiles");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        .out_dir(out)
        .compile_fds(files)
        .expect("the code generator runs");
}

fn rust_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .into_string()
                .expect("UTF-8 name")
        })
        .filter(|n| n.ends_with(".rs"))
        .collect();
    names.sort();
    names
}

#[test]
fn the_committed_grpc_code_is_what_the_protos_generate() {
    let committed = crate_dir().join("vendor/etcd/generated");
    let fresh = tempfile::tempdir().expect("a temporary directory");
    generate(fresh.path());
    let generated = rust_files(fresh.path());
    assert!(
        generated.contains(&"etcdserverpb.rs".to_string()),
        "the generator wrote {generated:?}"
    );

    if std::env::var_os("LEASEHOLD_REGENERATE").is_some() {
        std::fs::create_dir_all(&committed).expect("creating vendor/etcd/generated");
        for old in rust_files(&committed) {
            std::fs::remove_file(committed.join(old)).expect("removing an old file");
        }
        for name in &generated {
            std::fs::copy(fresh.path().join(name), committed.join(name)).expect("copying");
        }
        eprintln!("regenerated vendor/etcd/generated: {generated:?}");
        return;
    }

    assert_eq!(
        rust_files(&committed),
        generated,
        "vendor/etcd/generated holds other files than the generator writes; \
         regenerate: LEASEHOLD_REGENERATE=1 cargo test -p leasehold-etcd --test generated_code"
    );
    for name in &generated {
        let want = std::fs::read_to_string(fresh.path().join(name)).expect("generated file");
        let have = std::fs::read_to_string(committed.join(name)).expect("committed file");
        assert!(
            want == have,
            "vendor/etcd/generated/{name} is not what vendor/etcd/proto/ generates; regenerate: \
             LEASEHOLD_REGENERATE=1 cargo test -p leasehold-etcd --test generated_code"
        );
    }
}
