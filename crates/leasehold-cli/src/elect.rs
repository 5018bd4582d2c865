//! `leasehold elect` and `leasehold leader`: leader election from the shell.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{Store, Wait};

use crate::cli::{lock_options, ElectArgs};
use crate::describe::exact;
use crate::output::say;
use crate::run::{describe_wait, StatusLine};
use crate::supervisor::{supervise, Signals};

/// The shortest pause before campaigning again after the command exited
/// (and the base of the doubling after failures). Never shorter than the
/// poll cap: a candidate that has waited long elsewhere asks the store at
/// most a cap apart (on a store that does not wake it), and gets its turn
/// only if the key stays free that long.
const REST: Duration = Duration::from_millis(200);
/// The longest pause after a command that keeps failing: the pause doubles
/// with each failure in a row (0.2 s, 0.4 s, ... 30 s, each at least the
/// poll cap) and is back to the shortest after a success, so that a
/// command that fails at once is not restarted five times a second.
const MAX_REST: Duration = Duration::from_secs(30);

/// The pause after `failures` failed runs in a row (0: the last
/// succeeded), with other candidates' waits polling at most `poll_cap`
/// apart.
fn rest_after(failures: u32, poll_cap: Duration) -> Duration {
    REST.saturating_mul(1 << failures.min(8))
        .max(poll_cap)
        .min(MAX_REST)
}

pub async fn elect(store: &Store, args: ElectArgs) -> anyhow::Result<ExitCode> {
    let lease = &args.lease;
    let election = store.election_with(
        &lease.key,
        lock_options(lease, store.confirmation_window())?,
    )?;
    let mut signals = Signals::new()?;
    let mut failures = 0u32;
    loop {
        let mut status = StatusLine::new(&lease.key);
        let campaign = election.campaign_reporting(Wait::Forever, |reason| {
            status.show(&describe_wait(reason, None))
        });
        let leadership = tokio::select! {
            r = campaign => r?,
            sig = signals.next() => {
                status.clear();
                say!("interrupted while campaigning for {}", lease.key);
                return Ok(ExitCode::from(128 + sig as u8));
            }
        };
        status.clear();
        let term = leadership.term();
        say!("leader of {} (term {term}); running the command", lease.key);
        let env = [
            ("LEASEHOLD_KEY", lease.key.clone()),
            ("LEASEHOLD_FENCING_TOKEN", term.to_string()),
        ];
        let outcome = supervise(&*leadership, lease, &env, &mut signals).await?;
        let resigned = leadership.resign().await;
        outcome.watchdog.reap().await;
        if !outcome.started {
            return Ok(ExitCode::from(outcome.code));
        }
        if outcome.interrupted.is_some() {
            return Ok(ExitCode::from(outcome.code));
        }
        if outcome.lost || resigned.is_err() {
            say!(
                "leadership of {} lost (term {term}); campaigning again",
                lease.key
            );
        } else {
            failures = if outcome.code == 0 { 0 } else { failures + 1 };
            let rest = rest_after(
                failures,
                lease.poll_cap.unwrap_or(leasehold::DEFAULT_POLL_CAP),
            );
            say!(
                "the command exited with {} (term {term}); campaigning again in {}",
                outcome.code,
                exact(rest)
            );
            tokio::select! {
                _ = tokio::time::sleep(rest) => {}
                sig = signals.next() => return Ok(ExitCode::from(128 + sig as u8)),
            }
        }
    }
}
