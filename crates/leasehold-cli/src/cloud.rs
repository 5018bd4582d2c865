//! `leasehold-cloud`: the `leasehold` command with every store, the cloud
//! stores (Azure Blob, DynamoDB, S3) among them; `leasehold` runs it for
//! their URLs (see `leasehold_cli::main`).

fn main() -> std::process::ExitCode {
    leasehold_cli::main(leasehold_stores::Linked::every())
}
