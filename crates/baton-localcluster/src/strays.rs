//! Runners the nodes started on demand (docs/dynamic-runners.md) run in process groups
//! of their own, so that a node's death leaves their tasks running; stopping the nodes
//! does not stop them. A local cluster is torn down whole, so it stops them itself: every
//! `baton runner`, `baton relay` and `bwrap` whose command line names a folder of the
//! cluster's provisioners.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::Path;
use std::time::{Duration, Instant};

/// The processes of runners started on demand under `dir`: `baton runner`, `baton relay`
/// and `bwrap`, whose command line names `dir` or a path inside it.
pub fn runners_under(dir: &Path) -> Vec<Pid> {
    let needle = dir.as_os_str().as_encoded_bytes();
    // `dir` itself or a path in it, not a sibling whose name starts alike.
    let names_dir = |arg: &[u8]| {
        arg.windows(needle.len())
            .enumerate()
            .any(|(at, w)| w == needle && matches!(arg.get(at + needle.len()), None | Some(b'/')))
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let program = args.first()?;
            let ours = matches!(args.get(1), Some(&b"runner") | Some(&b"relay"))
                || program.ends_with(b"bwrap");
            (ours && args.iter().any(|a| names_dir(a))).then(|| Pid::from_raw(pid))
        })
        .collect()
}

/// Stops every runner under `dir`: SIGTERM (each finishes or kills its task, then
/// exits), then SIGKILL to those still there after `grace`. Returns how many there were.
pub fn stop_runners_under(dir: &Path, grace: Duration) -> usize {
    let found = runners_under(dir);
    for pid in &found {
        let _ = kill(*pid, Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !runners_under(dir).is_empty() {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in runners_under(dir) {
        let _ = kill(pid, Signal::SIGKILL);
    }
    found.len()
}
