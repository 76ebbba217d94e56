//! What every benchmark's report shares: the machine and the load it ran on, and writing its own
//! section of docs/benchmarks.md. One file, included with `#[path]` by the benches of both crates
//! (`operator/benches/*.rs`, `e2e/benches/*.rs`); not every bench uses every item.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Markers of the introduction every bench keeps at the top of docs/benchmarks.md.
pub const INTRO_START: &str = "<!-- bench-intro:start -->";
/// End marker of the introduction.
pub const INTRO_END: &str = "<!-- bench-intro:end -->";
/// The introduction.
pub const INTRO: &str = "<!-- bench-intro:start -->
# Benchmarks

Written by `make bench` (`cargo bench -p capstan-e2e --bench devcluster`, `cargo bench -p capstan --bench
source_render`, `cargo bench -p capstan --bench appset`, `cargo bench -p capstan-e2e --bench operator` and
`cargo bench -p capstan-e2e --bench reporter`, release profile); each bench replaces only its own section between its markers. Benchmarks are
benchmarks, not timed tests: nothing fails on a slow figure.

Figures are medians (with min – max or p90) of several runs on a **shared 2-core development machine**
that other jobs were using at the same time; each section records the machine, the date and the load
average. Treat differences below ~30 % as noise; compare runs from the same section only.
<!-- bench-intro:end -->
";

/// `N cores (CPU model), M GiB RAM, Linux <release>`.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        })
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem_gib:.0} GiB RAM, Linux {}", kernel.trim())
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The first line `program args` prints (versions, the date), empty when it cannot run.
pub fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// Now, as `YYYY-MM-DD HH:MM UTC`.
pub fn date() -> String {
    command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat` CPU times.
pub fn clock_ticks() -> f64 {
    command_line("getconf", &["CLK_TCK"]).parse().unwrap_or(100.0)
}

/// Writes `section` (which starts with `start` and ends with `end`) into docs/benchmarks.md in place
/// of the bench's previous section, or at the end, keeping the introduction first. The file is read
/// right before it is written: other benches write other sections of it.
pub fn write_section(start: &str, end: &str, section: &str) -> std::io::Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let with_intro = if old.contains(INTRO_START) {
        splice(&old, INTRO_START, INTRO_END, INTRO)
    } else {
        format!("{INTRO}\n{old}")
    };
    let new = splice(&with_intro, start, end, section);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, new)?;
    Ok(path)
}

/// Replaces the text between `start` and `end` (inclusive) with `section`, or appends it.
fn splice(old: &str, start: &str, end: &str, section: &str) -> String {
    match (old.find(start), old.find(end)) {
        (Some(a), Some(b)) if b > a => {
            let mut stop = b + end.len();
            if old[stop..].starts_with('\n') {
                stop += 1;
            }
            format!("{}{}{}", &old[..a], section, &old[stop..])
        }
        _ if old.is_empty() => section.to_string(),
        _ => format!("{}\n{}", old.trim_end_matches('\n').to_string() + "\n", section),
    }
}
