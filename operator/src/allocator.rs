//! The process's memory allocator: jemalloc, configured to give freed memory back to the system.
//!
//! Why not glibc's malloc: it gives every thread that allocates an arena of its own (up to eight per
//! core) and keeps the pages freed in them. A reconcile's working set (rendered objects, applied
//! results, parsed live objects) is freed when it ends, but with glibc the process kept it: at
//! 50,000 managed objects the operator's RSS was about twice its heap (docs/benchmarks.md, S1).
//! jemalloc's size classes fragment less, and with the settings below a background thread returns
//! dirty pages about a second after they are freed instead of waiting for the next allocation.
//!
//! Operators can still tune it at run time with `_RJEM_MALLOC_CONF` (the same syntax), which
//! jemalloc reads after the settings compiled in here.

use std::ffi::c_char;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's `malloc_conf` (read once, at the first allocation):
/// - `background_thread:true`: purging runs on jemalloc's own thread, so memory freed by a burst of
///   syncs goes back even when the process is idle afterwards;
/// - `dirty_decay_ms:1000`: freed pages are kept one second for reuse (the default is ten), then returned;
/// - `muzzy_decay_ms:0`: returned pages are released at once rather than through a second delay.
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: Option<&'static c_char> =
    Some(unsafe { &*c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() });
