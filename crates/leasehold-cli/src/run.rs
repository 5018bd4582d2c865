//! `leasehold run`: a command run under a lock.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use leasehold::{
    Error, HolderInfo, LeaseGuard, LockOptions, MultiGuard, MultiLock, RunOutcome, RunRecord,
    RunReport, Store, WaitReason,
};

use crate::cli::{lock_options, RunArgs};
use crate::describe::{describe_holder, describe_run, exact, short};
use crate::exit::{EXIT_BACKEND, EXIT_LOST, EXIT_NOT_OBTAINED};
use crate::output::say;
use crate::supervisor::{supervise, Outcome, Signals};

pub async fn run(store: &Store, args: RunArgs) -> anyhow::Result<ExitCode> {
    let result = acquire_and_run(store, &args).await?;
    if args.json {
        report_json(&result);
    }
    Ok(ExitCode::from(result.exit_code))
}

async fn acquire_and_run(store: &Store, args: &RunArgs) -> anyhow::Result<RunResult> {
    let lease = &args.lease;
    if lease.keys.len() > 1 || args.permits.is_some_and(|p| p > 1) {
        return acquire_all_and_run(store, args).await;
    }
    let mut result = RunResult::new(&lease.key);
    // Key and TTL first, so their errors come before any about --grace.
    let plain = LockOptions::new().ttl(lease.ttl);
    // `--limit 1` is the lock on KEY itself, not a one-slot semaphore
    // (whose slot key is another key): `run KEY` and `run KEY --limit 1`
    // exclude each other. It still says slot 0.
    let limit = args.limit.filter(|n| *n > 1);
    let side = Side::of(args, limit);
    match (side, limit) {
        (Side::Reader | Side::Writer, _) => {
            drop(store.rw_lock_with(&lease.key, MAX_READERS, plain)?)
        }
        (Side::Lock, None) => drop(store.lock_with(&lease.key, plain)?),
        (Side::Lock, Some(n)) => drop(store.semaphore_with(&lease.key, n, plain)?),
    }
    let opts = lock_options(lease, store.confirmation_window())?;
    let mut signals = Signals::new()?;

    // One attempt, or (`--wait`) waiting while the status line says why:
    // the same for the lock, the semaphore and either side of the
    // reader-writer lock, whose methods differ only in name.
    macro_rules! take {
        ($lock:expr, $try_:ident, $reporting:ident) => {
            match args.wait {
                None => $lock.$try_().await,
                Some(wait) => {
                    let mut status = StatusLine::new(&lease.key);
                    let r = $lock
                        .$reporting(wait, |reason| status.show(&describe_wait(reason, limit)))
                        .await;
                    status.clear();
                    r
                }
            }
        };
    }
    let acquiring = async {
        match (side, limit) {
            (Side::Reader, _) => {
                let rw = store.rw_lock_with(&lease.key, MAX_READERS, opts)?;
                take!(rw, try_read, read_reporting).map(|g| (g.into_guard(), None))
            }
            (Side::Writer, _) => {
                let rw = store.rw_lock_with(&lease.key, MAX_READERS, opts)?;
                take!(rw, try_write, write_reporting)
                    .map(|g| (g.into_guard(), args.limit.map(|_| 0)))
            }
            (Side::Lock, None) => {
                let lock = store.lock_with(&lease.key, opts)?;
                take!(lock, try_acquire, acquire_reporting).map(|g| (g, args.limit.map(|_| 0)))
            }
            (Side::Lock, Some(n)) => {
                let sem = store.semaphore_with(&lease.key, n, opts)?;
                take!(sem, try_acquire, acquire_reporting)
                    .map(|p| (p.slot(), p))
                    .map(|(slot, p)| (p.into_guard(), Some(slot)))
            }
        }
    };
    let acquired = tokio::select! {
        r = acquiring => r,
        sig = signals.next() => {
            say!("interrupted while waiting for {}", lease.key);
            return Ok(result.ended("interrupted", 128 + sig as u8));
        }
    };
    let (guard, slot) = match acquired {
        Ok(acquired) => acquired,
        Err(Error::Held {
            holder, readers, ..
        }) => {
            let by = held_by(holder.as_deref(), readers);
            let message = match limit {
                Some(n) => format!(
                    "all {n} permits of {} are held (one by {by}); not running the command",
                    lease.key
                ),
                None => format!("{} is held by {by}; not running the command", lease.key),
            };
            return Ok(result.not_obtained(message));
        }
        Err(Error::Quarantined {
            epoch, remaining, ..
        }) => {
            let message =
                quarantine_message(&lease.key, epoch, remaining, store.confirmation_window());
            return Ok(result.not_obtained(message));
        }
        Err(Error::TimedOut { waited, .. }) => {
            let by = who_holds(store, &lease.key, side, limit, lease.ttl).await?;
            let message = format!(
                "gave up waiting for {} after {} ({by}); not running the command",
                lease.key,
                short(waited)
            );
            return Ok(result.not_obtained(message));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(period) = args.once_per {
        // Under the lock, so no run can succeed between this look and ours.
        match store.last_success_within(&lease.key, period).await {
            Ok(None) => {}
            Ok(Some(last)) => {
                result.fencing_token = Some(guard.fencing_token());
                result.fencing_tokens = Some([(lease.key.clone(), guard.fencing_token())].into());
                let released = guard.release().await;
                say!(
                    "{}: last succeeded {}, within --once-per {}; not running the command",
                    lease.key,
                    describe_run(&last),
                    exact(period)
                );
                if let Err(e) = released {
                    say!(
                        "could not release {} ({e}); it ends when its TTL runs out",
                        lease.key
                    );
                }
                result.last_success = Some(last);
                return Ok(result.ended("skipped", 0));
            }
            Err(e) => {
                let _ = guard.release().await;
                return Err(anyhow::Error::from(e).context(format!(
                    "cannot read the last success of {}; not running the command",
                    lease.key
                )));
            }
        }
    }
    tracing::info!(key = %lease.key, token = guard.fencing_token(), ?slot, "running the command");
    let token = guard.fencing_token();
    let mut env = vec![
        ("LEASEHOLD_KEY", lease.key.clone()),
        ("LEASEHOLD_FENCING_TOKEN", token.to_string()),
    ];
    env.extend(key_vars([(lease.key.as_str(), token)]));
    if let Some(slot) = slot {
        env.push(("LEASEHOLD_SLOT", slot.to_string()));
    }
    result.fencing_token = Some(token);
    result.fencing_tokens = Some([(lease.key.clone(), token)].into());
    result.slot = slot;
    let started_at = SystemTime::now();
    let outcome = supervise(&guard, lease, &env, &mut signals).await?;
    let run = args.once_per.map(|_| run_report(started_at, &outcome));
    Ok(finish(Hold::One(guard), result, outcome, run).await)
}

/// `run KEY KEY... -- CMD`: every key held, all or none (a
/// [`MultiLock`](leasehold::MultiLock): taken in byte order, so two runs
/// naming the same keys in any order never deadlock), each as a plain run
/// (or `--shared`) holds one key; or `run KEY --limit N --permits P`: P
/// permits at once ([`Semaphore::acquire_many`](leasehold::Semaphore::acquire_many)).
/// The command is stopped when any is lost.
async fn acquire_all_and_run(store: &Store, args: &RunArgs) -> anyhow::Result<RunResult> {
    let lease = &args.lease;
    let mut result = RunResult::new(&lease.key);
    let opts = lock_options(lease, store.confirmation_window())?;
    if let (Some(permits), Some(limit)) = (args.permits, args.limit) {
        return permits_and_run(store, args, opts, limit, permits, result).await;
    }
    let side = |key: &str| match () {
        () if args.shared => Side::Reader,
        () if key.len() <= leasehold::MAX_RW_LOCK_KEY_LEN => Side::Writer,
        () => Side::Lock,
    };
    let mut builder = MultiLock::builder(store, opts).max_readers(MAX_READERS);
    for key in &lease.keys {
        builder = match side(key) {
            Side::Reader => builder.read(key),
            Side::Writer => builder.write(key),
            Side::Lock => builder.lock(key),
        };
    }
    let all = builder.build()?;
    let mut signals = Signals::new()?;
    let acquiring = async {
        match args.wait {
            None => all.try_acquire().await,
            Some(wait) => {
                let mut status = StatusLine::new(&lease.key);
                let r = all
                    .acquire_reporting(wait, |key, reason| {
                        status.show(&format!("{key} {}", describe_wait(reason, None)))
                    })
                    .await;
                status.clear();
                r
            }
        }
    };
    let acquired = tokio::select! {
        r = acquiring => r,
        sig = signals.next() => {
            say!("interrupted while waiting for {}", lease.key);
            return Ok(result.ended("interrupted", 128 + sig as u8));
        }
    };
    let held = match acquired {
        Ok(held) => held,
        Err(Error::Held {
            key,
            holder,
            readers,
        }) => {
            let message = format!(
                "{key} (one of {}) is held by {}; not running the command",
                lease.key,
                held_by(holder.as_deref(), readers)
            );
            return Ok(result.not_obtained(message));
        }
        Err(Error::Quarantined {
            epoch, remaining, ..
        }) => {
            let message =
                quarantine_message(&lease.key, epoch, remaining, store.confirmation_window());
            return Ok(result.not_obtained(message));
        }
        Err(Error::TimedOut { key, waited }) => {
            let by = who_holds(store, &key, side(&key), None, lease.ttl).await?;
            let message = format!(
                "gave up waiting for {} after {} ({key} {by}; the keys taken before it were released); not running the command",
                lease.key,
                short(waited)
            );
            return Ok(result.not_obtained(message));
        }
        Err(e) => return Err(e.into()),
    };
    let tokens: Vec<(&str, u64)> = held
        .iter()
        .map(|(key, guard)| (key.as_str(), guard.fencing_token()))
        .collect();
    tracing::info!(keys = %lease.key, ?tokens, "running the command");
    let env: Vec<_> = key_vars(tokens.iter().copied()).collect();
    result.fencing_tokens = Some(
        tokens
            .iter()
            .map(|(key, token)| (key.to_string(), *token))
            .collect(),
    );
    let outcome = supervise(&held, lease, &env, &mut signals).await?;
    Ok(finish(Hold::All(held), result, outcome, None).await)
}

/// `run KEY --limit N --permits P`: P of the N permits, all or none.
async fn permits_and_run(
    store: &Store,
    args: &RunArgs,
    opts: LockOptions,
    limit: u32,
    permits: u32,
    mut result: RunResult,
) -> anyhow::Result<RunResult> {
    let lease = &args.lease;
    let sem = store.semaphore_with(&lease.key, limit, opts)?;
    let mut signals = Signals::new()?;
    let acquiring = async {
        let tried = sem.try_acquire_many(permits).await;
        match (tried, args.wait) {
            (Err(e), Some(wait)) if matches!(e, Error::Held { .. }) || e.is_retryable() => {
                let mut status = StatusLine::new(&lease.key);
                status.show(&format!("fewer than {permits} of its {limit} permits free"));
                let r = match wait {
                    leasehold::Wait::Forever => sem.acquire_many(permits).await,
                    leasehold::Wait::Timeout(t) => sem.acquire_many_timeout(permits, t).await,
                };
                status.clear();
                r
            }
            (tried, _) => tried,
        }
    };
    let acquired = tokio::select! {
        r = acquiring => r,
        sig = signals.next() => {
            say!("interrupted while waiting for {}", lease.key);
            return Ok(result.ended("interrupted", 128 + sig as u8));
        }
    };
    let held = match acquired {
        Ok(held) => held,
        Err(e @ (Error::Held { .. } | Error::TimedOut { .. } | Error::Quarantined { .. })) => {
            let message = match e {
                Error::TimedOut { waited, .. } => format!(
                    "gave up waiting for {permits} of the {limit} permits of {} after {}; not running the command",
                    lease.key,
                    short(waited)
                ),
                Error::Quarantined {
                    epoch, remaining, ..
                } => quarantine_message(&lease.key, epoch, remaining, store.confirmation_window()),
                _ => format!(
                    "fewer than {permits} of the {limit} permits of {} are free; not running the command",
                    lease.key
                ),
            };
            return Ok(result.not_obtained(message));
        }
        Err(e) => return Err(e.into()),
    };
    let tokens: Vec<(&str, u64)> = held
        .iter()
        .map(|(key, guard)| (key.as_str(), guard.fencing_token()))
        .collect();
    let mut slots: Vec<u32> = held
        .keys()
        .filter_map(|k| k.as_str().rsplit(':').next()?.parse().ok())
        .collect();
    slots.sort_unstable();
    let slots: Vec<String> = slots.iter().map(u32::to_string).collect();
    tracing::info!(key = %lease.key, ?tokens, "running the command");
    let mut env = vec![
        ("LEASEHOLD_KEY", lease.key.clone()),
        ("LEASEHOLD_SLOTS", slots.join(" ")),
    ];
    env.extend(key_vars(tokens.iter().copied()).filter(|(name, _)| *name != "LEASEHOLD_KEYS"));
    result.fencing_tokens = Some(
        tokens
            .iter()
            .map(|(key, token)| (key.to_string(), *token))
            .collect(),
    );
    let outcome = supervise(&held, lease, &env, &mut signals).await?;
    Ok(finish(Hold::All(held), result, outcome, None).await)
}

/// `LEASEHOLD_KEYS` (the keys in byte order, separated by spaces) and
/// `LEASEHOLD_FENCING_TOKENS` (`{"KEY": token, ...}`) for the command.
fn key_vars<'a>(
    tokens: impl IntoIterator<Item = (&'a str, u64)>,
) -> impl Iterator<Item = (&'static str, String)> {
    let tokens: std::collections::BTreeMap<&str, u64> = tokens.into_iter().collect();
    let keys: Vec<&str> = tokens.keys().copied().collect();
    let json = serde_json::to_string(&tokens).unwrap_or_default();
    [
        ("LEASEHOLD_KEYS", keys.join(" ")),
        ("LEASEHOLD_FENCING_TOKENS", json),
    ]
    .into_iter()
}

/// Who kept a key from us, for "is held by ...": its holder, or the
/// `--shared` runs that read it, and whether that is this very process.
fn held_by(holder: Option<&HolderInfo>, readers: u32) -> String {
    let by = match readers {
        0 => describe_holder(holder),
        1 => "1 --shared run (a reader)".to_string(),
        n => format!("{n} --shared runs (readers)"),
    };
    let this = match holder {
        Some(h) if readers == 0 && h.owner.is_this_process() => " (this very process)",
        _ => "",
    };
    format!("{by}{this}")
}

/// Who holds `key` now, asked after a wait for it ran out: "held by ...",
/// "N --shared runs hold it", "all N permits held" or "free now".
async fn who_holds(
    store: &Store,
    key: &str,
    side: Side,
    limit: Option<u32>,
    ttl: Duration,
) -> anyhow::Result<String> {
    let now = store.inspect(key).await.ok();
    let readers = match side {
        Side::Writer => store
            .rw_lock_with(key, MAX_READERS, LockOptions::new().ttl(ttl))?
            .inspect()
            .await
            .map(|i| i.holding_readers().count())
            .unwrap_or(0),
        _ => 0,
    };
    Ok(match (limit, now) {
        (Some(n), _) => format!("all {n} permits held"),
        (None, _) if readers > 0 => format!("{readers} --shared runs hold it"),
        // A wait shorter than opening the store sends nothing.
        (None, Some(info)) if info.holder.is_none() => "free now".to_string(),
        (None, info) => format!(
            "held by {}",
            describe_holder(info.and_then(|i| i.holder).as_ref())
        ),
    })
}

/// What `run` holds while the command runs.
// One value per process, moved once: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Hold {
    /// One key's lease (or permit, or side of a reader-writer lock).
    One(LeaseGuard),
    /// Several keys' (`run KEY KEY...`).
    All(MultiGuard),
}

impl Hold {
    /// Ends the lease(s), recording `run` first if given (one key only).
    async fn release(self, run: Option<RunReport>) -> leasehold::Result<()> {
        match (self, run) {
            (Hold::One(guard), Some(run)) => guard.release_with(run).await,
            (Hold::One(guard), None) => guard.release().await,
            (Hold::All(held), _) => held.release().await,
        }
    }
}

/// How many `--shared` runs of a key run at once.
const MAX_READERS: u32 = leasehold::DEFAULT_MAX_READERS;

/// Which hold `run` takes on KEY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `--shared`: a reader of the reader-writer lock on KEY.
    Reader,
    /// A plain run: the writer of the reader-writer lock on KEY (the lease
    /// on KEY a lock takes, granted only once no `--shared` run holds).
    Writer,
    /// A semaphore permit (`--limit N`, N > 1), or the lock on a key too
    /// long to have readers (so no `--shared` run can hold it).
    Lock,
}

impl Side {
    fn of(args: &RunArgs, limit: Option<u32>) -> Side {
        if args.shared {
            Side::Reader
        } else if limit.is_none() && args.lease.key.len() <= leasehold::MAX_RW_LOCK_KEY_LEN {
            Side::Writer
        } else {
            Side::Lock
        }
    }
}

/// How a run ended, for the store's run records (`--once-per`): a success
/// only when CMD exited 0 under the lock and nobody told it to stop.
fn run_report(started_at: SystemTime, outcome: &Outcome) -> RunReport {
    let result = if outcome.lost {
        RunOutcome::LeaseLost
    } else if outcome.interrupted.is_some() {
        RunOutcome::Interrupted
    } else if outcome.started && outcome.code == 0 {
        RunOutcome::Succeeded
    } else {
        RunOutcome::Failed
    };
    RunReport::new(started_at, result).exit_code(Some(i32::from(outcome.code)))
}

/// How `run` ended, for `run --json`: whose exit code leasehold exits with.
#[derive(Debug, serde::Serialize)]
pub struct RunResult {
    /// "completed", "skipped", "not_obtained", "lost", "not_started",
    /// "interrupted" or "error".
    pub result: &'static str,
    /// The code leasehold exits with.
    pub exit_code: u8,
    /// The command's own exit code (128+S if killed by signal S), if it ran.
    pub command_exit_code: Option<u8>,
    pub key: String,
    /// The fencing token of the lease held, if it was obtained (one key).
    pub fencing_token: Option<u64>,
    /// Every key held and its fencing token, once obtained.
    pub fencing_tokens: Option<std::collections::BTreeMap<String, u64>>,
    /// The semaphore slot held (`--limit`), if one was.
    pub slot: Option<u32>,
    /// What went wrong, if anything did.
    pub error: Option<String>,
    /// `--once-per`: the recent success that made this run skip.
    pub last_success: Option<RunRecord>,
}

impl RunResult {
    fn new(key: &str) -> Self {
        RunResult {
            result: "error",
            exit_code: EXIT_BACKEND,
            command_exit_code: None,
            key: key.to_string(),
            fencing_token: None,
            fencing_tokens: None,
            slot: None,
            error: None,
            last_success: None,
        }
    }

    /// The lock was not obtained: `message` said and kept; exit 75.
    fn not_obtained(mut self, message: String) -> Self {
        say!("{message}");
        self.error = Some(message);
        self.ended("not_obtained", EXIT_NOT_OBTAINED)
    }

    fn ended(mut self, result: &'static str, exit_code: u8) -> Self {
        self.result = result;
        self.exit_code = exit_code;
        self
    }

    /// `run` failed before or without running the command.
    pub fn failed(key: &str, exit_code: u8, message: String) -> Self {
        let mut result = RunResult::new(key).ended("error", exit_code);
        result.error = Some(message);
        result
    }
}

/// The JSON line of `run --json`, kept until [`write_json`] writes it:
/// it must be the last line leasehold writes, after `-v`'s metrics summary
/// and anything logged while the process winds down.
static JSON_LINE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Keeps `result` as the JSON line to write last (`run --json`).
pub fn report_json(result: &RunResult) {
    if let Ok(line) = serde_json::to_string(result) {
        *JSON_LINE.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
    }
}

/// Writes the JSON line kept by [`report_json`], if any, to stderr; the
/// last thing `main` does.
pub fn write_json() {
    if let Some(line) = JSON_LINE.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
    }
}

/// Releases the lease after the command ended, recording `run` first if
/// given (`--once-per`); how `run` ended: 76 if the lease was lost while the
/// command ran, else the command's code.
pub async fn finish(
    hold: Hold,
    mut result: RunResult,
    outcome: Outcome,
    run: Option<RunReport>,
) -> RunResult {
    let key = result.key.clone();
    let recording = run.is_some();
    let released = hold.release(run).await;
    // The watchdog's own exit (its cgroup removed, its process torn down)
    // goes on while the lease is released; it is reaped after. (Awaiting
    // both at once measured slower, by 0.4 ms a run.)
    outcome.watchdog.reap().await;
    if !outcome.started {
        result.error = outcome.spawn_error;
        return result.ended("not_started", outcome.code);
    }
    result.command_exit_code = Some(outcome.code);
    if outcome.lost || matches!(released, Err(Error::LeaseLost { .. })) {
        let message = format!("lease on {key} was lost while the command ran");
        if !outcome.lost {
            say!("{message}");
        }
        result.error = Some(message);
        return result.ended("lost", EXIT_LOST);
    }
    if let Err(e) = released {
        if recording {
            say!("could not record the run of {key} or release it ({e}); if the run's success was not recorded, the next attempt runs the command again; the lease ends when its TTL runs out at the latest");
        } else {
            say!("could not release {key} ({e}); it ends when its TTL runs out");
        }
    }
    result.ended("completed", outcome.code)
}

/// Who holds the key, shown while waiting: a live line on a terminal,
/// otherwise one line when the wait starts.
pub struct StatusLine {
    key: String,
    terminal: bool,
    shown: bool,
}

impl StatusLine {
    pub fn new(key: &str) -> Self {
        StatusLine {
            key: key.to_string(),
            terminal: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    /// Shows why we wait: "held by ...", "all N permits held (...)", ...
    pub fn show(&mut self, why: &str) {
        if self.shown && !self.terminal {
            return;
        }
        let line = format!("leasehold: waiting for {}: {why}", self.key);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.shown = true;
    }

    pub fn clear(&mut self) {
        if self.terminal && self.shown {
            eprint!("\r\x1b[2K");
        }
        self.shown = false;
    }
}

fn describe_holders(holders: &[HolderInfo]) -> String {
    let names: Vec<String> = holders.iter().map(|h| describe_holder(Some(h))).collect();
    names.join("; ")
}

/// Why `run` did not run the command in a quarantined epoch: what
/// happened, how long is left, and the way to skip the wait for a
/// brand-new store.
fn quarantine_message(key: &str, epoch: u64, remaining: Duration, window: Duration) -> String {
    format!(
        "{key}: the store's data is new to this process (store epoch {epoch}: the store was just created, by this or another process, or re-created after its data was lost) and nothing of an earlier store is known, so nothing is granted for another {} (quarantine: one confirmation window, {}, from the epoch's beginning as far as the store can tell), so that any holder of lost data has stopped first; not running the command. If no store ever existed here, a store made by `leasehold init --new` grants at once; this one exists now, so wait (`--wait` longer than the time left), or, if nothing uses it yet, remove it and run `leasehold init --new`",
        short(remaining),
        short(window)
    )
}

/// Why a wait goes on, for the status line; `limit` is a semaphore's.
pub fn describe_wait(reason: WaitReason<'_>, limit: Option<u32>) -> String {
    match reason {
        WaitReason::Held(holders) => match limit {
            // A plain run waiting for `--shared` runs hears of each.
            None if holders.len() > 1 => format!("held by {}", describe_holders(holders)),
            None => format!("held by {}", describe_holder(holders.first())),
            Some(n) => format!("all {n} permits held ({})", describe_holders(holders)),
        },
        // The end as a time of day, not a countdown: the line is shown
        // once (once per change of reason on a terminal) and would go stale.
        WaitReason::Quarantine { remaining, .. } => format!(
            "the store's data is new (quarantine until {}, {} from now; `leasehold init --new` before the first use of a brand-new store skips it)",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now() + remaining),
            short(remaining)
        ),
        _ => "not granted yet".into(),
    }
}
