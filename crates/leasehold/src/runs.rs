//! Run records: how the last run of a job under a key ended, and when it
//! last succeeded (`leasehold run --once-per`).
//!
//! A job that runs under a lease ([`LeaseGuard::release_with`](crate::LeaseGuard::release_with))
//! leaves a [`RunRecord`] with the key's record in the store: the key's
//! *last run* (every run, successful or not) and its *last success*. They
//! live next to the key's fencing counter, so they survive releases,
//! expiries and breaks, and go with the store's data when that is lost (see
//! [run records](crate::backend#run-records) for the contract and the clock
//! rule). [`Store::last_success_within`](crate::Store::last_success_within)
//! answers "did this job succeed less than a period ago?".

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::backend::Owner;
use crate::error::{Error, Result};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunOutcome {
    /// The job did its work while the lease was held (a command: exited 0).
    /// Only this outcome is recorded as the key's last success.
    Succeeded,
    /// The job failed (a command: exited non-zero, was killed, or could not
    /// be started).
    Failed,
    /// The job was told to stop (a command: leasehold forwarded SIGINT,
    /// SIGTERM or SIGHUP to it), whatever it exited with.
    Interrupted,
    /// The lease was lost before the job ended, whatever the job did.
    LeaseLost,
}

/// How a run ended, as the job reports it to
/// [`LeaseGuard::release_with`](crate::LeaseGuard::release_with); the guard
/// adds the owner, the fencing token and the end time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// When the run started (wall clock).
    pub started_at: SystemTime,
    /// How it ended.
    pub outcome: RunOutcome,
    /// The command's exit code (128+S if killed by signal S), if there was
    /// a command.
    pub exit_code: Option<i32>,
}

impl RunReport {
    /// A run started at `started_at` that ended with `outcome`.
    pub fn new(started_at: SystemTime, outcome: RunOutcome) -> Self {
        RunReport {
            started_at,
            outcome,
            exit_code: None,
        }
    }

    /// A successful run started at `started_at`.
    pub fn succeeded(started_at: SystemTime) -> Self {
        Self::new(started_at, RunOutcome::Succeeded)
    }

    /// A failed run started at `started_at`.
    pub fn failed(started_at: SystemTime) -> Self {
        Self::new(started_at, RunOutcome::Failed)
    }

    /// Sets [`exit_code`](Self::exit_code).
    pub fn exit_code(mut self, code: Option<i32>) -> Self {
        self.exit_code = code;
        self
    }
}

/// One run of a job under a key's lease, as stored: shown by `status
/// --json` as `last_success` and `last_run`.
///
/// Times are Unix milliseconds in JSON (`started_at_unix_ms`,
/// `ended_at_unix_ms`). `ended_at` is on the clock the backend names (see
/// [run records](crate::backend#run-records)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// How the run ended.
    pub outcome: RunOutcome,
    /// When the run started (the runner's wall clock).
    #[serde(rename = "started_at_unix_ms", with = "unix_ms")]
    pub started_at: SystemTime,
    /// When the run ended: the runner's wall clock when it released, or
    /// the store's clock where the backend stamps it.
    #[serde(rename = "ended_at_unix_ms", with = "unix_ms")]
    pub ended_at: SystemTime,
    /// Who ran it.
    pub owner: Owner,
    /// The fencing token of the lease it ran under.
    pub fencing_token: u64,
    /// The command's exit code (128+S if killed by signal S), if known.
    pub exit_code: Option<i32>,
}

impl RunRecord {
    /// A record of a run under the lease with `fencing_token`.
    pub fn new(
        outcome: RunOutcome,
        started_at: SystemTime,
        ended_at: SystemTime,
        owner: Owner,
        fencing_token: u64,
    ) -> Self {
        RunRecord {
            outcome,
            started_at,
            ended_at,
            owner,
            fencing_token,
            exit_code: None,
        }
    }

    /// Sets [`exit_code`](Self::exit_code).
    pub fn with_exit_code(mut self, exit_code: Option<i32>) -> Self {
        self.exit_code = exit_code;
        self
    }

    /// Sets [`ended_at`](Self::ended_at) (a backend that stamps the end
    /// with its own clock).
    pub fn with_ended_at(mut self, ended_at: SystemTime) -> Self {
        self.ended_at = ended_at;
        self
    }

    /// Whether this run succeeded.
    pub fn succeeded(&self) -> bool {
        self.outcome == RunOutcome::Succeeded
    }

    /// How long ago the run ended, by `now` (zero if it ended "after" `now`,
    /// which only clock skew can make happen).
    pub fn ended_ago(&self, now: SystemTime) -> Duration {
        now.duration_since(self.ended_at).unwrap_or(Duration::ZERO)
    }

    /// The record as backends store it: one line of JSON, the same shape
    /// `status --json` shows.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(self).expect("a run record always serialises")
    }

    /// Reads back what [`to_stored`](Self::to_stored) wrote.
    ///
    /// # Errors
    /// [`Error::Backend`] (not retryable) naming `backend` when the text is
    /// not a run record.
    pub fn from_stored(backend: &'static str, text: &str) -> Result<RunRecord> {
        serde_json::from_str(text).map_err(|e| {
            Error::backend(
                backend,
                "decode",
                false,
                format!("a stored run record is not what leasehold writes ({e}); is the store used by something else?"),
            )
        })
    }
}

mod unix_ms {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::to_unix_ms(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(UNIX_EPOCH + Duration::from_millis(u64::deserialize(d)?))
    }
}

/// Milliseconds since the Unix epoch (0 for earlier times).
pub(crate) fn to_unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_form_round_trips_and_names_times_in_unix_ms() {
        let owner = Owner {
            host: "vm-1".into(),
            pid: 42,
            label: Some("nightly \"import\" ✓".into()),
        };
        let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
        let run = RunRecord::new(
            RunOutcome::Succeeded,
            at(1_700_000_000_000),
            at(1_700_000_003_500),
            owner,
            7,
        )
        .with_exit_code(Some(0));
        let text = run.to_stored();
        assert!(
            text.contains("\"ended_at_unix_ms\":1700000003500"),
            "{text}"
        );
        assert!(text.contains("\"outcome\":\"succeeded\""), "{text}");
        assert_eq!(RunRecord::from_stored("test", &text).unwrap(), run);
        assert!(RunRecord::from_stored("test", "{\"outcome\":1}").is_err());
        assert_eq!(
            run.ended_ago(at(1_700_000_013_500)),
            Duration::from_secs(10)
        );
        // Ended "in the future" (the writer's clock ahead): zero, not an error.
        assert_eq!(run.ended_ago(at(1_700_000_000_000)), Duration::ZERO);
    }
}
