//! `leasehold`: every store but the cloud stores, which it runs
//! `leasehold-cloud` for (see `leasehold_cli::main`).

fn main() -> std::process::ExitCode {
    leasehold_cli::main(leasehold_stores::Linked::WITHOUT_CLOUD)
}
