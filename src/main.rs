//! The `causeway` binary.

use std::process::ExitCode;

/// The engine allocates and frees many small records per message on several threads; mimalloc
/// does that in about half the time of the system allocator (see benches/).
///
/// It is built without transparent huge pages (`no_thp`: it does not `madvise` its arenas
/// for them). With them, each 2 MiB region the heap has touched is resident in full: a long
/// run's RSS crept up as long-lived pattern state pinned more regions (37 to 50 MiB over an
/// hour's soak, against 19 to 21 MiB without), and zeroing huge pages on first touch cost
/// about a fifth of the linking time. Where the kernel gives huge pages to every mapping
/// (`/sys/kernel/mm/transparent_hugepage/enabled` = `always`), `MIMALLOC_ALLOW_THP=0` turns
/// them off for the process.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    causeway::entry::main()
}
