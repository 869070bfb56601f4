//! The `causeway` binary.

use std::process::ExitCode;

/// The engine allocates and frees many small records per message on several threads; mimalloc
/// does that in about half the time of the system allocator (see benches/).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    causeway::entry::main()
}
