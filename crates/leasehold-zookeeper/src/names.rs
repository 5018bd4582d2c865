//! Where things live in the ZooKeeper tree: the store's root (the URL's
//! chroot), its epoch marker, its clock node, an epoch's record folder, and
//! the record node of each key.
//!
//! # Node names of keys
//! A key's record is one node directly under its epoch's folder, named
//! after the key with every `/` written `%2F` (ZooKeeper would take it for
//! a level of the tree), and, for a key made only of dots (`.`, `..`: not
//! allowed as node names), every `.` written `%2E`. Keys never hold `%`, so
//! the mapping is reversible; a child whose name does not map back exactly
//! is not a leasehold record and is skipped.

use leasehold::{Error, Key, Result};

/// The root a store URL without a chroot names.
pub const DEFAULT_ROOT: &str = "/leasehold";

/// The node names of one store, under its root.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    root: String,
}

impl Paths {
    /// The store rooted at `root` (already checked by [`check_root`]).
    pub(crate) fn new(root: &str) -> Self {
        Paths {
            root: root.to_string(),
        }
    }

    /// The store's root node.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// The epoch marker: the epoch, max TTL and protocol (JSON), and the
    /// parent of the epoch's record folder.
    pub(crate) fn marker(&self) -> String {
        format!("{}/epoch", self.root)
    }

    /// The node written to read the server's clock (its `mtime`).
    pub(crate) fn clock(&self) -> String {
        format!("{}/clock", self.root)
    }

    /// The folder of epoch `epoch`'s records, under the marker.
    pub(crate) fn records(&self, epoch: u64) -> String {
        format!("{}/epoch/keys-{epoch}", self.root)
    }

    /// The record of `key` in epoch `epoch`.
    pub(crate) fn record(&self, epoch: u64, key: &Key) -> String {
        format!("{}/{}", self.records(epoch), node_name(key))
    }

    /// The key a record's path stands for, if the path is a record of
    /// some epoch of this store.
    pub(crate) fn key_of_path(&self, path: &str) -> Option<Key> {
        let rest = path
            .strip_prefix(&self.root)?
            .strip_prefix("/epoch/keys-")?;
        let (epoch, name) = rest.split_once('/')?;
        epoch.parse::<u64>().ok()?;
        key_of(name)
    }
}

/// The node name of `key`'s record.
pub(crate) fn node_name(key: &Key) -> String {
    let k = key.as_str();
    if k.bytes().all(|b| b == b'.') {
        return k.replace('.', "%2E");
    }
    k.replace('/', "%2F")
}

/// The key a record node's name stands for, if it is one.
pub(crate) fn key_of(name: &str) -> Option<Key> {
    let key = Key::new(name.replace("%2F", "/").replace("%2E", ".")).ok()?;
    (node_name(&key) == name).then_some(key)
}

/// Checks a store root (the URL's chroot): `/` and then segments of
/// `A-Z a-z 0-9 . _ : -`, none `.` or `..`, not under `/zookeeper`
/// (ZooKeeper's own).
///
/// # Errors
/// [`Error::InvalidInput`] naming the rule.
pub(crate) fn check_root(root: &str) -> Result<()> {
    let rule = "a chroot is /SEGMENT[/SEGMENT...], each of A-Z a-z 0-9 . _ : - (not . or ..), outside /zookeeper";
    let bad = |why: &str| Err(Error::invalid("chroot", format!("{root:?} {why}; {rule}")));
    let Some(rest) = root.strip_prefix('/') else {
        return bad("does not start with /");
    };
    if rest.is_empty() {
        return bad("is the tree's root (leasehold needs a node of its own)");
    }
    for segment in rest.split('/') {
        let ok_chars = segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if segment.is_empty() || segment == "." || segment == ".." || !ok_chars {
            return bad(&format!("has the segment {segment:?}"));
        }
    }
    if rest == "zookeeper" || rest.starts_with("zookeeper/") {
        return bad("is under ZooKeeper's own /zookeeper");
    }
    if root.len() > 512 {
        return bad("is longer than 512 characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_round_trip_and_strangers_are_skipped() {
        for (key, name) in [
            ("import-A", "import-A"),
            ("jobs/nightly/x.v2", "jobs%2Fnightly%2Fx.v2"),
            (".", "%2E"),
            ("..", "%2E%2E"),
            ("a/./b", "a%2F.%2Fb"),
            ("ns:key_1", "ns:key_1"),
        ] {
            let k = Key::new(key).unwrap();
            assert_eq!(node_name(&k), name);
            assert_eq!(key_of(name), Some(k));
        }
        // Not produced by node_name: not a record.
        assert_eq!(key_of("a%2E"), None);
        assert_eq!(key_of("a/b"), None);
        assert_eq!(key_of("x y"), None);
    }

    #[test]
    fn record_paths_map_back_to_keys() {
        let p = Paths::new("/apps/locks");
        let k = Key::new("jobs/a").unwrap();
        let path = p.record(12, &k);
        assert_eq!(path, "/apps/locks/epoch/keys-12/jobs%2Fa");
        assert_eq!(p.key_of_path(&path), Some(k));
        assert_eq!(p.key_of_path("/apps/locks/epoch"), None);
        assert_eq!(p.key_of_path("/apps/locks/epoch/keys-12"), None);
        assert_eq!(p.key_of_path("/apps/locks/clock"), None);
        assert_eq!(p.key_of_path("/other/epoch/keys-1/a"), None);
    }

    #[test]
    fn roots_follow_the_rule() {
        for ok in ["/leasehold", "/a/b-c/d_e.f:g", "/zookeeperx"] {
            check_root(ok).unwrap();
        }
        for bad in [
            "",
            "/",
            "a",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/a b",
            "/zookeeper",
            "/zookeeper/x",
        ] {
            let err = check_root(bad).unwrap_err();
            assert!(err.to_string().contains("a chroot is"), "{bad}: {err}");
        }
    }
}
