//! The independent witness: a fenced resource that every holder writes to
//! while it believes it holds a lock, and the log the checker reads.
//!
//! It trusts nothing of leasehold's: it is a directory of plain files. Each
//! write takes an exclusive `flock` on the key's state file, compares the
//! writer's fencing token with the greatest one the key has ever accepted
//! (across store epochs: every store's tokens grow across the loss of its
//! data, so a resource fencing by token alone needs no more), accepts the
//! write if it is not smaller (and raises the maximum), and appends one
//! line to `witness.log` saying what happened. The log line's epoch only
//! records which store epoch (by the coordinator's count) a write fell in.
//! Time is the machine's boot clock, shared by every process here.
//!
//! Log line: `KIND KEY EPOCH TOKEN WORKER PID PPID T_NS ACCEPTED [DETAIL]`.
//!
//! A reader of a reader-writer lock writes to its lock's key like any
//! holder (its writes stand for reads of the resource); its records' DETAIL
//! is `shared`. Readers share the last writer's token, so the resource
//! fences reads and writes apart ([`Fence`], the rule
//! `docs/guarantees.md` gives users of reader-writer locks): a read is
//! accepted if its token is not below the greatest *write* token accepted,
//! a write if it is not below that and *above* the greatest read token
//! accepted. So a lost writer cannot write once a reader has read with its
//! token, and a stale reader cannot read past a newer writer's write. With
//! no readers this is the plain rule.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use leasehold::backend::Clock;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A holder starts its critical section.
    Begin,
    /// A holder does a unit of work.
    Tick,
    /// A holder ends its critical section normally.
    End,
    /// A holder's guard said the lease is lost.
    Lost,
    /// A write deliberately sent after the guard said lost (as if it had
    /// been in flight): fencing must reject it if someone newer wrote.
    Late,
    /// The coordinator injected a fault (DETAIL names it).
    Fault,
    /// The store lost its state; tokens start again (coordinator).
    Epoch,
    /// A multi-key worker starts an attempt to take the key (with the
    /// others of its set; DETAIL is the wait's length in ms). Not fenced.
    Wait,
    /// A multi-key worker's attempt ended without the key. Not fenced.
    GaveUp,
    /// The coordinator saw the key held, with TOKEN, by WORKER (the
    /// lease's owner label), its lease live; DETAIL is the snapshot's
    /// number and when its request was sent (T_NS: when answered). Not
    /// fenced.
    Held,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Begin => "begin",
            Kind::Tick => "tick",
            Kind::End => "end",
            Kind::Lost => "lost",
            Kind::Late => "late",
            Kind::Fault => "fault",
            Kind::Epoch => "epoch",
            Kind::Wait => "wait",
            Kind::GaveUp => "gave-up",
            Kind::Held => "held",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "begin" => Kind::Begin,
            "tick" => Kind::Tick,
            "end" => Kind::End,
            "lost" => Kind::Lost,
            "late" => Kind::Late,
            "fault" => Kind::Fault,
            "epoch" => Kind::Epoch,
            "wait" => Kind::Wait,
            "gave-up" => Kind::GaveUp,
            "held" => Kind::Held,
            _ => return None,
        })
    }
}

/// One line of the log.
#[derive(Debug, Clone)]
pub struct Record {
    pub kind: Kind,
    pub key: String,
    pub epoch: u64,
    pub token: u64,
    pub worker: String,
    pub pid: u32,
    pub ppid: u32,
    pub t_ns: u64,
    pub accepted: bool,
    /// Written by a reader of a reader-writer lock.
    pub shared: bool,
    pub detail: String,
}

/// The detail of a reader's records.
const SHARED: &str = "shared";

/// A handle on the witness directory.
#[derive(Debug, Clone)]
pub struct Witness {
    dir: PathBuf,
    /// This handle's writes are a reader's.
    shared: bool,
}

pub fn now_ns() -> u64 {
    leasehold::backend::SystemClock.now().as_nanos() as u64
}

impl Witness {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Witness {
            dir: dir.into(),
            shared: false,
        }
    }

    /// The same witness, for a reader of a reader-writer lock: every record
    /// it writes is marked shared.
    pub fn shared(self, shared: bool) -> Self {
        Witness { shared, ..self }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("witness.log")
    }

    fn epoch(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("epoch"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Starts a new store epoch (the store lost its state).
    pub fn bump_epoch(&self, detail: &str) -> std::io::Result<u64> {
        let next = self.epoch() + 1;
        // Written aside and renamed into place: a writer reading the file
        // while it is rewritten would see it empty and take epoch 0 (the
        // checker's fencing recount caught exactly that).
        let aside = self.dir.join("epoch.next");
        std::fs::write(&aside, next.to_string())?;
        std::fs::rename(aside, self.dir.join("epoch"))?;
        self.append(&epoch_record(next, detail))?;
        Ok(next)
    }

    /// A store event that changes nothing of the witness's order (a
    /// failover): an epoch record of the current epoch, for the report to
    /// count.
    pub fn note(&self, detail: &str) -> std::io::Result<()> {
        self.append(&epoch_record(self.epoch(), detail))
    }

    /// A fenced write of `kind` by `worker` holding `token` on `key`: accepted
    /// unless a greater token has written to the key (in any epoch; see
    /// [`Fence`] for readers).
    pub fn write(&self, kind: Kind, key: &str, token: u64, worker: &str) -> std::io::Result<bool> {
        Ok(self.write_if(kind, key, token, worker, || true)? == Some(true))
    }

    /// Like [`write`](Self::write), but only if `still_held()` is true when
    /// checked under the witness's lock (so a check of the guard and the
    /// write it allows are one step): `None` if it was not (nothing is
    /// written), else whether the write was accepted.
    pub fn write_if(
        &self,
        kind: Kind,
        key: &str,
        token: u64,
        worker: &str,
        still_held: impl FnOnce() -> bool,
    ) -> std::io::Result<Option<bool>> {
        let state_path = self.dir.join(format!("{}.state", key.replace('/', "%")));
        let state = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(state_path)?;
        let _lock = Flock::exclusive(&state)?;
        if !still_held() {
            return Ok(None);
        }
        let epoch = self.epoch();
        let mut text = String::new();
        (&state).read_to_string(&mut text)?;
        // "EPOCH MAX MAX_READ": the epoch of the last change, kept for
        // reading; the maxima hold across epochs.
        let mut words = text.split(' ').skip(1).map(|w| w.trim().parse::<u64>());
        let mut fence = Fence {
            write: words.next().and_then(Result::ok).unwrap_or(0),
            read: words.next().and_then(Result::ok).unwrap_or(0),
        };
        let before = fence;
        let accepted = kind == Kind::Lost || fence.admit(token, self.shared);
        if fence != before {
            state.set_len(0)?;
            (&state).seek(SeekFrom::Start(0))?;
            write!(&state, "{epoch} {} {}", fence.write, fence.read)?;
        }
        self.append(&Record {
            kind,
            key: key.into(),
            epoch,
            token,
            worker: worker.into(),
            pid: std::process::id(),
            // SAFETY: getppid cannot fail.
            ppid: unsafe { libc::getppid() } as u32,
            t_ns: now_ns(),
            accepted,
            shared: self.shared,
            detail: String::new(),
        })?;
        Ok(Some(accepted))
    }

    /// A record that is no write to the resource (a [`Kind::Wait`], a
    /// [`Kind::GaveUp`]): appended as it is, not fenced.
    pub fn mark(
        &self,
        kind: Kind,
        key: &str,
        token: u64,
        worker: &str,
        detail: &str,
    ) -> std::io::Result<()> {
        self.mark_at(now_ns(), kind, key, token, worker, detail)
    }

    /// [`mark`](Self::mark) with the time given (a snapshot's answer).
    pub fn mark_at(
        &self,
        t_ns: u64,
        kind: Kind,
        key: &str,
        token: u64,
        worker: &str,
        detail: &str,
    ) -> std::io::Result<()> {
        self.unfenced(t_ns, kind, key, token, (worker, std::process::id()), detail)
    }

    /// Appends a record of `kind` that is no write to the resource, by
    /// `(worker, pid)`.
    fn unfenced(
        &self,
        t_ns: u64,
        kind: Kind,
        key: &str,
        token: u64,
        (worker, pid): (&str, u32),
        detail: &str,
    ) -> std::io::Result<()> {
        self.append(&Record {
            kind,
            key: key.into(),
            epoch: self.epoch(),
            token,
            worker: worker.into(),
            pid,
            ppid: 0,
            t_ns,
            accepted: true,
            shared: false,
            detail: detail.into(),
        })
    }

    /// Records a fault injected at `t_ns` (`now_ns()` for one injected now)
    /// on `key`'s holder `worker`, whose grant had fencing token `token` (0
    /// when unknown). For a `break`, `token` is the token of the lease the
    /// store says it ended, and `t_ns` the time the break was sent (it is
    /// recorded once the store has answered).
    pub fn fault(
        &self,
        t_ns: u64,
        key: &str,
        worker: &str,
        pid: u32,
        token: u64,
        what: &str,
    ) -> std::io::Result<()> {
        self.unfenced(t_ns, Kind::Fault, key, token, (worker, pid), what)
    }

    fn append(&self, r: &Record) -> std::io::Result<()> {
        let line = format!(
            "{} {} {} {} {} {} {} {} {} {}\n",
            r.kind.as_str(),
            r.key,
            r.epoch,
            r.token,
            r.worker,
            r.pid,
            r.ppid,
            r.t_ns,
            u8::from(r.accepted),
            match (r.shared, r.detail.is_empty()) {
                (true, _) => SHARED,
                (false, true) => "-",
                (false, false) => &r.detail,
            }
        );
        // One write() on an O_APPEND file: lines never interleave.
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        log.write_all(line.as_bytes())
    }

    /// Every record so far, in log order.
    pub fn read(&self) -> std::io::Result<Vec<Record>> {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        Ok(text.lines().filter_map(parse_line).collect())
    }

    /// Records appended after byte `offset`; returns them and the new offset.
    pub fn read_from(&self, offset: u64) -> std::io::Result<(Vec<Record>, u64)> {
        let mut f = match File::open(self.log_path()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
            Err(e) => return Err(e),
        };
        f.seek(SeekFrom::Start(offset))?;
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        // Only whole lines; a partial last line is read next time.
        let whole = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let records = text[..whole].lines().filter_map(parse_line).collect();
        Ok((records, offset + whole as u64))
    }
}

fn parse_line(line: &str) -> Option<Record> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() < 10 {
        return None;
    }
    Some(Record {
        kind: Kind::parse(f[0])?,
        key: f[1].into(),
        epoch: f[2].parse().ok()?,
        token: f[3].parse().ok()?,
        worker: f[4].into(),
        pid: f[5].parse().ok()?,
        ppid: f[6].parse().ok()?,
        t_ns: f[7].parse().ok()?,
        accepted: f[8] == "1",
        shared: f[9] == SHARED,
        detail: if f[9] == "-" || f[9] == SHARED {
            String::new()
        } else {
            f[9..].join(" ")
        },
    })
}

/// A key's fence: the greatest write token and the greatest read token the
/// resource has accepted (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub write: u64,
    pub read: u64,
}

impl Fence {
    /// Whether a write (`shared`: a read) with `token` is accepted.
    pub fn admits(&self, token: u64, shared: bool) -> bool {
        token >= self.write && (shared || token > self.read)
    }

    /// Takes an accepted write (`shared`: read) with `token` into account.
    pub fn raise(&mut self, token: u64, shared: bool) {
        match shared {
            true => self.read = self.read.max(token),
            false => self.write = self.write.max(token),
        }
    }

    /// [`admits`](Self::admits), and [`raise`](Self::raise) if so.
    pub fn admit(&mut self, token: u64, shared: bool) -> bool {
        let accepted = self.admits(token, shared);
        if accepted {
            self.raise(token, shared);
        }
        accepted
    }
}

/// An exclusive `flock` held until dropped.
struct Flock<'a>(&'a File);

impl<'a> Flock<'a> {
    fn exclusive(file: &'a File) -> std::io::Result<Self> {
        // std's File::lock would do, but it needs Rust 1.89; flock is one call.
        // SAFETY: a valid open fd.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Flock(file))
    }
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // SAFETY: a valid open fd.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// The coordinator's record of a store event in witness epoch `epoch`.
fn epoch_record(epoch: u64, detail: &str) -> Record {
    Record {
        kind: Kind::Epoch,
        key: "-".into(),
        epoch,
        token: 0,
        worker: "coordinator".into(),
        pid: std::process::id(),
        ppid: 0,
        t_ns: now_ns(),
        accepted: true,
        shared: false,
        detail: detail.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_rejects_older_tokens_across_epochs() {
        let dir = tempfile_dir("fencing");
        let w = Witness::new(&dir);
        assert!(w.write(Kind::Begin, "k", 5, "a").unwrap());
        assert!(w.write(Kind::Tick, "k", 5, "a").unwrap());
        assert!(w.write(Kind::Begin, "k", 6, "b").unwrap());
        assert!(!w.write(Kind::Late, "k", 5, "a").unwrap());
        assert!(
            w.write(Kind::Begin, "other", 1, "c").unwrap(),
            "keys are independent"
        );
        w.bump_epoch("restart").unwrap();
        assert!(
            !w.write(Kind::Late, "k", 5, "a").unwrap(),
            "a new epoch does not start over"
        );
        assert!(w.write(Kind::Begin, "k", 7, "d").unwrap());
        let records = w.read().unwrap();
        assert_eq!(records.len(), 8);
        assert!(!records[3].accepted && records[3].kind == Kind::Late);
        assert!(!records[6].accepted && records[6].epoch == 1);
        assert!(records[7].accepted);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_readers_records_read_back_as_shared() {
        let dir = tempfile_dir("shared");
        let w = Witness::new(&dir);
        let reader = w.clone().shared(true);
        assert!(reader.write(Kind::Begin, "k", 5, "r").unwrap());
        assert!(w.write(Kind::Begin, "k", 6, "w").unwrap());
        assert!(!reader.write(Kind::Late, "k", 5, "r").unwrap());
        w.fault(now_ns(), "k", "r", 1, 5, "kill").unwrap();
        let shared: Vec<bool> = w.read().unwrap().iter().map(|r| r.shared).collect();
        assert_eq!(shared, [true, false, true, false]);
        assert_eq!(w.read().unwrap()[3].detail, "kill");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_read_with_a_writers_token_fences_that_writer_out() {
        let mut f = Fence::default();
        assert!(f.admit(6, false), "the writer");
        assert!(f.admit(6, true), "a reader after it, with its token");
        assert!(!f.admit(6, false), "the same writer, after the read");
        assert!(!f.admit(5, true), "a read below the last write");
        assert!(f.admit(7, false), "the next writer");
        assert!(!f.admit(6, true), "a stale reader after it");
        assert_eq!(f, Fence { write: 7, read: 6 });
    }

    fn tempfile_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("witness-test-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
