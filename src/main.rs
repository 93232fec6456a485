use std::time::Duration;

use clap::Parser;

/// mimalloc instead of the system allocator: a read of a nested page makes
/// and drops many small objects, and glibc's malloc and free were a third
/// of the server's time (BENCHMARKS.md, *Read path*).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the runtime waits, once the command has returned, for blocking
/// work it cannot cancel: the command bounds its own shutdown.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

fn main() -> anyhow::Result<()> {
    let cli = brainstem::cli::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(cli.run());
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}
