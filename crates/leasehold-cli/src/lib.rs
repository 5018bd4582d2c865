//! The `leasehold` command: a thin shell over the leasehold library.
//!
//! Two binaries run it ([`main`]): `leasehold`, with every store but the
//! cloud stores, and `leasehold-cloud`, with every store, which `leasehold`
//! runs in its own place for a cloud store's URL (see [`main`]). Not an API:
//! this library is the two binaries' shared code, and may change in any
//! release.

mod cli;
mod describe;
mod elect;
mod exit;
mod fd;
mod init;
mod inspect;
mod open;
mod output;
mod proctitle;
mod proctree;
mod run;
mod summary;
mod supervisor;
mod watchdog;

use std::process::ExitCode;

use cli::{Cli, Command};
use exit::{error_chain, exit_code_for, Interrupted, EXIT_BACKEND, EXIT_USAGE};
use leasehold_stores as stores;
use open::{open_within, warn_if_max_ttl_ignored};
use output::say;

/// The longest wait at exit for requests finishing in the background: a
/// late grant's acquisition and release take well under it on a store that
/// answers, and an unreachable store delays the exit by no more (a `run
/// --wait` must not overshoot its wait by much).
const FINISH_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The command line as it was given, read once: the process's own copy is
/// overwritten where it holds a secret (see [`hide_secrets`]).
static ARGS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// The command line as it was given (with the program's name).
fn args() -> &'static [std::ffi::OsString] {
    ARGS.get_or_init(|| std::env::args_os().collect())
}

/// The name of the binary with every store, installed beside `leasehold`.
pub const CLOUD_BINARY: &str = "leasehold-cloud";

/// The variable `leasehold` sets for the binary it runs in its place (see
/// [`main`]).
const EXECED_MARK: &str = "LEASEHOLD_RAN_CLOUD_BINARY";

/// The stores this binary links, as its `main` gave them.
static LINKED: std::sync::OnceLock<stores::Linked> = std::sync::OnceLock::new();

/// The stores this binary links, as [`main`] set them (never the cloud
/// stores if unset: naming them here would link them into `leasehold`).
fn linked() -> stores::Linked {
    LINKED
        .get()
        .copied()
        .unwrap_or(stores::Linked::WITHOUT_CLOUD)
}

/// The `leasehold` command, in a binary that links the stores `linked`
/// names.
///
/// `leasehold` links every store but the cloud stores (Azure Blob,
/// DynamoDB, S3), whose SDKs are most of a binary with every store and
/// cost every short run their start-up (docs/benchmarks.md, section 11);
/// given a cloud store's URL, it runs `leasehold-cloud` (every store),
/// installed beside it, in its own place (`execv`: the same process, its
/// arguments, environment, open files and signal state unchanged), before
/// doing anything else.
pub fn main(linked: stores::Linked) -> ExitCode {
    one_malloc_arena();
    // A build without the cloud stores' features has nothing to run them
    // with: its own opener says which feature is missing.
    #[cfg(not(any(feature = "azblob", feature = "dynamodb", feature = "s3")))]
    let linked = stores::Linked::every();
    let _ = LINKED.set(linked);
    // Set by `leasehold` for the binary it runs in its place: seen by a
    // binary that still lacks the store, that binary was not
    // leasehold-cloud (a copy of `leasehold` under its name would run
    // itself for ever). Removed at once, while this process has one
    // thread: the commands it runs must not inherit it.
    let came_from_leasehold = std::env::var_os(EXECED_MARK).is_some();
    std::env::remove_var(EXECED_MARK);
    let mut args = args().iter().cloned();
    match args.nth(1) {
        Some(a) if a == watchdog::ARG => return watchdog::main(args.collect()),
        Some(a) if a == cli::MAN_ARG => {
            let command = args.next().map(|c| c.to_string_lossy().into_owned());
            return match cli::man_page(command.as_deref()) {
                Some(page) => print_generated(&page),
                None => {
                    say!("no such command (see leasehold --help)");
                    ExitCode::from(EXIT_USAGE)
                }
            };
        }
        _ => {}
    }
    let cli = match Cli::parse_args() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    // Generated from the command line's definition: no store, no runtime.
    if let Some(text) = cli.generated() {
        return print_generated(&text);
    }
    if linked.lacks(stores::effective_url(cli.store.as_deref())) {
        return exec_cloud_binary(came_from_leasehold);
    }
    hide_secrets(cli.store.as_deref());
    // While this process has one thread: before tracing, metrics and the
    // runtime. A LEASEHOLD_SLOT inherited from an enclosing `run --limit`
    // is not this run's: a plain run's command must not see it (a
    // semaphore's gets its own).
    std::env::remove_var("LEASEHOLD_SLOT");
    match &cli.command {
        Command::Run(args) => supervisor::prepare(&args.lease),
        Command::Elect(args) => supervisor::prepare(&args.lease),
        _ => {}
    }
    init_tracing(cli.verbose);
    let metrics = (cli.verbose > 0).then(summary::MetricsSummary::install);
    // One thread: the child is spawned from the main thread, which lives as
    // long as the process, so the child's parent-death signal fires only when
    // leasehold itself dies (PR_SET_PDEATHSIG is tied to the spawning thread).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_BACKEND);
        }
    };
    // As the opener takes it: whitespace around it is not part of it.
    let store_url = cli.store.as_deref().map(|u| u.trim().to_string());
    let json_result = match &cli.command {
        Command::Run(args) => args.json.then(|| args.lease.key.clone()),
        _ => None,
    };
    // `status`, `list`, `leader --json`: a failure is JSON on stdout too.
    let json_look = matches!(
        &cli.command,
        Command::Status { json: true, .. }
            | Command::List { json: true, .. }
            | Command::Leader { json: true, .. }
    );
    let result = runtime.block_on(dispatch(cli));
    // Requests left to finish in the background (the release of a grant
    // that came just as a wait ran out or was interrupted) end before the
    // process does, so that none leaves a lease held until its TTL; bounded,
    // for a store that stopped answering.
    runtime.block_on(async {
        if tokio::time::timeout(FINISH_AT_EXIT, leasehold::finish_background())
            .await
            .is_err()
        {
            tracing::debug!("exiting with requests still unanswered in the background");
        }
    });
    supervisor::discard_spare();
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            if let Some(out) = err.downcast_ref::<output::OutputError>() {
                if out.is_broken_pipe() {
                    output::die_of_sigpipe();
                }
            }
            // The store's URL, and any argument (a URL given as the key).
            let message = match err.downcast_ref::<leasehold::Error>() {
                Some(leasehold::Error::NoStore { what }) => {
                    no_store_message(store_url.as_deref(), what)
                }
                _ => error_chain(&err),
            };
            let message = scrub_args(&stores::scrub(&message, store_url.as_deref()));
            say!("{message}");
            let code = exit_code_for(&err);
            if let Some(key) = json_result {
                let key = scrub_args(&key);
                let mut result = run::RunResult::failed(&key, code, message.clone());
                if err.downcast_ref::<Interrupted>().is_some() {
                    result.result = "interrupted";
                }
                run::report_json(&result);
            }
            if json_look {
                let failed = serde_json::json!({ "error": message, "exit_code": code });
                if output::print(&format!("{failed}\n")).is_err() {
                    tracing::debug!("could not write the JSON failure");
                }
            }
            ExitCode::from(code)
        }
    };
    if let Some(Some(metrics)) = metrics {
        metrics.print();
    }
    // `run --json`'s line, the last one written.
    run::write_json();
    drop(runtime);
    exit_now(code)
}

/// Runs [`CLOUD_BINARY`], from the directory this binary is in, in this
/// process's place, with the command line as it was given (`argv[0]`
/// too, so that its messages name the command the user typed); returns
/// only if that fails, saying why.
///
/// `again`: this process is already the binary `leasehold` ran, and it
/// lacks the store too (it is not leasehold-cloud): says so instead.
fn exec_cloud_binary(again: bool) -> ExitCode {
    use std::os::unix::ffi::OsStrExt;
    let cloud = std::env::current_exe().map(|exe| exe.with_file_name(CLOUD_BINARY));
    let why = match &cloud {
        Ok(_) if again => std::io::Error::other(
            "it has no cloud store either (a copy of `leasehold` under its name?)",
        ),
        Ok(path) => {
            std::env::set_var(EXECED_MARK, "1");
            let c = |s: &std::ffi::OsStr| std::ffi::CString::new(s.as_bytes());
            match (
                c(path.as_os_str()),
                args().iter().map(|a| c(a)).collect::<Result<Vec<_>, _>>(),
            ) {
                (Ok(path), Ok(argv)) => {
                    let mut ptrs: Vec<*const libc::c_char> =
                        argv.iter().map(|a| a.as_ptr()).collect();
                    ptrs.push(std::ptr::null());
                    // SAFETY: `path` and every argument are NUL-terminated
                    // strings that outlive the call, and `ptrs` ends with a
                    // null pointer; execv returns only on failure.
                    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
                    std::io::Error::last_os_error()
                }
                // An argument with a NUL byte cannot reach this process.
                _ => std::io::Error::from(std::io::ErrorKind::InvalidInput),
            }
        }
        Err(e) => std::io::Error::new(e.kind(), e.to_string()),
    };
    let path = cloud.map_or_else(|_| CLOUD_BINARY.into(), |p| p.display().to_string());
    say!(
        "cannot run {path}: {why}; `leasehold` runs it for the cloud stores ({}), and it is installed beside `leasehold` (cargo install, the .deb, the tarball and the wheel install both)",
        stores::CLOUD_SCHEMES
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    ExitCode::from(EXIT_USAGE)
}

/// One arena for the C allocator in every thread of this process. glibc
/// gives each new thread an arena of its own (128 MiB of address space
/// reserved, then first-touch page faults on each page it hands out); the
/// store's blocking thread, which runs SQLite's transactions, made one at
/// every short `leasehold run`. A few threads that take turns gain nothing
/// from several.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets a tunable of the C allocator before any other thread
    // exists; no allocation is made by the call.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Ends the process with `code` once everything of leasehold's is done
/// (the store closed, the runtime shut down): stdout flushed, then
/// `_exit`. Returning from `main` runs the C library's exit handlers and
/// every linked library's destructors (cold code in a large binary), which
/// leasehold needs none of: 0.04-0.06 ms of a short `leasehold run`, timed
/// side by side from fresh copies of both builds (docs/benchmarks.md,
/// section 11).
fn exit_now(code: ExitCode) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let code = (0..=u8::MAX)
        .find(|&c| ExitCode::from(c) == code)
        .unwrap_or(1);
    // SAFETY: _exit ends the process at once; nothing is left to run (see
    // above), and stdout, the only buffered stream, is flushed.
    unsafe { libc::_exit(i32::from(code)) }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    // Usage errors first, before any store is opened or contacted.
    let access = cli::validate(&cli.command).await?;
    // Opening has a bound of its own (`--connect-timeout`), not taken out
    // of `run --wait`: a zero wait is one try for the lock on every store,
    // however long connecting took. Interruptible: Ctrl-C while a store
    // does not answer ends leasehold at once. (`init` too: it opens the
    // store itself, twice, each within the bound.)
    let mut signals = supervisor::Signals::new()?;
    if let Command::Init { new } = cli.command {
        return tokio::select! {
            r = Box::pin(init::init(cli.store.as_deref(), new, cli.connect_timeout)) => r,
            sig = signals.next() => Err(Interrupted(sig).into()),
        };
    }
    let store = tokio::select! {
        // Boxed: the opener's future is deep (every store's).
        store = Box::pin(open_within(cli.store.as_deref(), access, cli.connect_timeout)) => store?,
        sig = signals.next() => return Err(Interrupted(sig).into()),
    };
    drop(signals);
    warn_if_max_ttl_ignored(cli.store.as_deref(), &store);
    match cli.command {
        Command::Run(args) => run::run(&store, args).await,
        Command::Elect(args) => elect::elect(&store, args).await,
        Command::Leader {
            key,
            json,
            follow: false,
            ..
        } => inspect::leader(&store, &key, json).await,
        Command::Leader {
            key, json, every, ..
        } => inspect::follow_leader(&store, &key, json, every).await,
        Command::Status { key, json } => inspect::status(&store, &key, json).await,
        Command::List { prefix, json } => inspect::list(&store, &prefix, json).await,
        Command::Break { key } => inspect::break_lease(&store, &key).await,
        Command::Completions { .. } => {
            unreachable!("answered in main, before any store is opened")
        }
        Command::Init { .. } => unreachable!("init opens the store itself"),
    }
}

/// Blanks the store URL's secrets (a password, a SAS) out of the command
/// line every user of the machine can read (`ps`, `/proc/PID/cmdline`),
/// for the rest of this process's life and its watchdog's, which is forked
/// after this. Before, they stayed visible for the whole run. Best effort:
/// the URL was visible from the exec until here (use `LEASEHOLD_STORE` or
/// the store's own variables, such as `PGPASSWORD`, to keep it out of the
/// command line altogether).
fn hide_secrets(url: Option<&str>) {
    let Some(url) = url else {
        return;
    };
    let secrets = stores::secrets(url);
    if !secrets.is_empty() {
        proctitle::blank_out(&secrets);
    }
}

/// Writes a completion script or man page to stdout.
fn print_generated(text: &[u8]) -> ExitCode {
    match output::print_bytes(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => output::die_of_sigpipe(),
        Err(e) => {
            say!("{e}");
            ExitCode::from(EXIT_BACKEND)
        }
    }
}

/// What a command that only looks says when there is no store at the URL.
fn no_store_message(url: Option<&str>, what: &str) -> String {
    let given = url.unwrap_or("sqlite:");
    let url = stores::redact(given);
    // The command to paste: quoted for the shell (a URL's `&` and `?`),
    // and without a URL where the one shown has a secret blanked out.
    let init = if url == given {
        format!("`leasehold init --store '{}'`", url.replace('\'', "'\\''"))
    } else {
        "`leasehold init --store URL` (the same URL, or LEASEHOLD_STORE)".to_string()
    };
    format!("no leasehold store at {url} ({what}); {init} creates one")
}

/// Shows clap's answer to a command line it did not take: help and the
/// version on stdout (a failed write is an error, as for every output),
/// anything else on stderr with exit 2. clap quotes the arguments it did
/// not understand, and a stray space (`--store= redis://u:PASSWORD@h`)
/// turns a store URL into one: every argument and `LEASEHOLD_STORE` are
/// scrubbed from the text as store URLs are everywhere else.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    use std::io::Write;
    let text = scrub_args(&err.render().to_string());
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => output::die_of_sigpipe(),
                Err(e) => {
                    say!("cannot write the help: {e}");
                    ExitCode::from(EXIT_BACKEND)
                }
            }
        }
        _ => {
            let mut stderr = std::io::stderr().lock();
            let _ = stderr.write_all(text.as_bytes());
            if let Some(hint) = missing_separator_hint(err) {
                let _ = writeln!(stderr, "{hint}");
            }
            drop(stderr);
            if let Some(key) = failed_json_run() {
                let message = text.lines().next().unwrap_or_default();
                let message = message.strip_prefix("error: ").unwrap_or(message);
                let key = scrub_args(&key);
                run::report_json(&run::RunResult::failed(&key, EXIT_USAGE, message.into()));
                run::write_json();
            }
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// For `run KEY CMD` (the `--` left out, so clap takes CMD for more keys
/// and says the command is missing, or for an argument it does not know):
/// what to write instead.
fn missing_separator_hint(err: &clap::Error) -> Option<&'static str> {
    use clap::error::ErrorKind;
    let args = args().get(1..)?;
    (matches!(
        err.kind(),
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument
    ) && args.iter().any(|a| a == "run" || a == "elect")
        && !args.iter().any(|a| a == "--"))
    .then_some("tip: put -- between KEY and the command: leasehold run KEY -- CMD [ARGS...] (several keys: leasehold run KEY KEY... -- CMD)")
}

/// `text` with every command-line argument and `LEASEHOLD_STORE` scrubbed
/// as a store URL would be (see [`usage_error`]).
fn scrub_args(text: &str) -> String {
    let candidates = args()
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .flat_map(|a| {
            // `--store=URL` as well as `URL`
            let value = a
                .strip_prefix("--")
                .and_then(|a| a.split_once('='))
                .map(|(_, v)| v.to_string());
            [Some(a), value]
        })
        .flatten()
        .chain(std::env::var("LEASEHOLD_STORE").ok())
        // And as the opener takes them: without whitespace around.
        .flat_map(|a| [a.trim().to_string(), a]);
    let mut text = text.to_string();
    for arg in candidates {
        if !arg.is_empty() {
            text = stores::scrub(&text, Some(&arg));
        }
    }
    text
}

/// For a `run --json` command line that clap did not take: the key it
/// names, as far as can be told (empty if none), so that the JSON line
/// `--json` promises is written for a usage error too.
fn failed_json_run() -> Option<String> {
    use clap::CommandFactory;
    let args: Vec<String> = args()
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .collect();
    let cli = Cli::command();
    let run = cli.find_subcommand("run")?;
    let at = args.iter().position(|a| a == "run")?;
    let options = || run.get_arguments().chain(cli.get_arguments());
    let takes_value = |arg: &str| {
        options().any(|o| {
            o.get_action().takes_values()
                && (o.get_long().is_some_and(|l| arg == format!("--{l}"))
                    || o.get_short().is_some_and(|c| arg == format!("-{c}")))
        })
    };
    let mut json = false;
    let mut key = None;
    let mut rest = args[at + 1..].iter();
    while let Some(arg) = rest.next() {
        if arg == "--json" {
            json = true;
        } else if arg.starts_with('-') {
            if takes_value(arg) {
                rest.next();
            }
        } else if key.is_none() {
            key = Some(arg.clone());
        }
    }
    json.then(|| key.unwrap_or_default())
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match verbose {
        // Nothing to log: no subscriber at all, which saves a short run
        // building one.
        0 if std::env::var_os(EnvFilter::DEFAULT_ENV).is_none() => return,
        0 => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("off")),
        1 => EnvFilter::new("leasehold=debug,leasehold_cli=debug"),
        _ => EnvFilter::new("leasehold=trace,leasehold_cli=trace,info"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A failed write to stderr (its reader gone) is dropped: the
        // default reports it with eprintln!, which panics.
        .log_internal_errors(false)
        .with_ansi(output::colour_stderr())
        .with_target(false)
        .init();
}
