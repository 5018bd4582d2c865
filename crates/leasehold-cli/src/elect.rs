//! `leasehold elect` and `leasehold leader`: leader election from the shell.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{Store, Wait};

use crate::cli::ElectArgs;
use crate::output::say;
use crate::run::{describe_holder, lock_options, StatusLine};
use crate::supervisor::{supervise, Signals};

/// Pause before campaigning again after the command exited, so that other
/// candidates (polling every 50-100 ms) get their turn.
const REST: Duration = Duration::from_millis(200);

pub async fn elect(store: &Store, args: ElectArgs) -> anyhow::Result<ExitCode> {
    let lease = &args.lease;
    let election = store.election_with(
        &lease.key,
        lock_options(lease, store.confirmation_window())?,
    )?;
    let mut signals = Signals::new()?;
    loop {
        let mut status = StatusLine::new(&lease.key);
        let campaign = election.campaign_with(Wait::Forever, |h| {
            status.show(&format!("held by {}", describe_holder(h)))
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
        let env = [("LEASEHOLD_FENCING_TOKEN", term.to_string())];
        let outcome = supervise(leadership.guard(), lease, &env, &mut signals).await?;
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
            say!(
                "the command exited with {} (term {term}); campaigning again",
                outcome.code
            );
            tokio::select! {
                _ = tokio::time::sleep(REST) => {}
                sig = signals.next() => return Ok(ExitCode::from(128 + sig as u8)),
            }
        }
    }
}
