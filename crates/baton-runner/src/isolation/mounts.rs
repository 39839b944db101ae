//! A task's own view of the file system, in a mount namespace of its own (the agent is
//! root):
//!
//! - `/tmp`, `/var/tmp` and `/dev/shm` are the task's alone: the first two its own folder
//!   beside its work dir, the third a fresh tmpfs of 64 MiB (Docker's size). Nothing it
//!   leaves there is seen by the next task, and nothing the next one writes there is seen
//!   by anything it left. So are its System V and POSIX IPC objects (an IPC namespace of
//!   its own, and a fresh `/dev/mqueue`).
//! - `/proc` shows it its own processes only (`hidepid=invisible`): not the agent's, not
//!   its siblings' command lines.
//! - Its work dir is reachable even when a folder above it is closed to others (a
//!   checkout under `/root`, any `mktemp -d`): that folder is covered, in the task's view
//!   only, by an empty tmpfs that holds just the path down to the work dir, which is
//!   bound there. The task sees nothing else of the closed folder, as before; the host's
//!   folders keep their modes.
//!
//! Everything is worked out in the agent; the forked child, before it takes the task's
//! uid, only makes system calls with what was prepared (no allocation after a fork). A
//! bind mount takes its source from the caller's own namespace only, so the child opens
//! the work dir once it has its namespace, before anything is mounted over its path.

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use std::ffi::{CStr, CString};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The folders every task gets a private one of.
const PRIVATE_TMP: [&str; 2] = ["/tmp", "/var/tmp"];
const PRIVATE_SHM: &str = "/dev/shm";
const PRIVATE_MQUEUE: &str = "/dev/mqueue";

/// One task's prepared view; `enter` it in the task's process before it takes its uid.
pub(crate) struct TaskView {
    work: CString,
    tmp: CString,
    /// Which of `PRIVATE_TMP` exist here.
    tmp_targets: Vec<CString>,
    shm: bool,
    mqueue: bool,
    way_in: Option<WayIn>,
}

/// How the work dir's path is made to exist in the task's view.
struct WayIn {
    /// A closed folder to cover with an empty tmpfs, if one is in the way.
    cover: Option<CString>,
    /// Folders to make, top first, the work dir last (where it is bound).
    make: Vec<CString>,
}

impl TaskView {
    /// Prepares the view of a task whose work dir is `work` and private tmp is `tmp`
    /// (both absolute and existing).
    pub(crate) fn prepare(work: &Path, tmp: &Path) -> std::io::Result<TaskView> {
        let tmp_targets = PRIVATE_TMP
            .iter()
            .filter(|p| Path::new(p).is_dir())
            .map(|p| c_path(Path::new(p)))
            .collect::<std::io::Result<_>>()?;
        Ok(TaskView {
            work: c_path(work)?,
            tmp: c_path(tmp)?,
            tmp_targets,
            shm: Path::new(PRIVATE_SHM).is_dir(),
            mqueue: Path::new(PRIVATE_MQUEUE).is_dir(),
            way_in: way_in(work)?,
        })
    }

    /// Called in the task's process, still root: a mount namespace of its own with the
    /// private folders, and the way into the work dir.
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)?;
        // Nothing mounted here may reach the host's view.
        mount(
            None,
            c"/",
            None,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None,
        )?;
        // Opened now, in this namespace, before /tmp or a cover hides the path.
        let work_fd = match self.way_in {
            Some(_) => Some(nix::fcntl::open(
                self.work.as_c_str(),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?),
            None => None,
        };
        // The task's tmp folder, once over /tmp, hides its own path when the work dir lies
        // under /tmp: the next folders get it from the first.
        let mut source = self.tmp.as_c_str();
        for target in &self.tmp_targets {
            mount(Some(source), target, None, MsFlags::MS_BIND, None)?;
            source = target;
        }
        if self.shm {
            mount(
                Some(c"tmpfs"),
                c"/dev/shm",
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(c"mode=1777,size=64m"),
            )?;
        }
        if self.mqueue {
            mount(
                Some(c"mqueue"),
                c"/dev/mqueue",
                Some(c"mqueue"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None,
            )?;
        }
        mount(
            Some(c"proc"),
            c"/proc",
            Some(c"proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(c"hidepid=invisible"),
        )?;
        if let Some(way) = &self.way_in {
            if let Some(cover) = &way.cover {
                mount(
                    Some(c"tmpfs"),
                    cover,
                    Some(c"tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some(c"mode=0711,size=1m"),
                )?;
            }
            for dir in &way.make {
                match nix::unistd::mkdir(dir.as_c_str(), Mode::from_bits_truncate(0o711)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if let Some(fd) = &work_fd {
                let mut path = [0u8; 32];
                mount(
                    Some(fd_path(fd.as_raw_fd(), &mut path)),
                    &self.work,
                    None,
                    MsFlags::MS_BIND,
                    None,
                )?;
            }
        }
        Ok(())
    }
}

fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: MsFlags,
    data: Option<&CStr>,
) -> std::io::Result<()> {
    Ok(nix::mount::mount(source, target, fstype, flags, data)?)
}

/// `/proc/self/fd/<fd>`, written into `buf`: a forked child may not allocate.
fn fd_path(fd: i32, buf: &mut [u8; 32]) -> &CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut count) = (fd.unsigned_abs(), 0);
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..count].iter().rev().enumerate() {
        buf[PREFIX.len() + i] = *d;
    }
    buf[PREFIX.len() + count] = 0;
    CStr::from_bytes_until_nul(&buf[..]).expect("a nul was just written")
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// What it takes for `work`'s path to lead to it in the task's view: nothing when every
/// folder above lets others through and none is made private; otherwise the folders to
/// make below whatever hides or closes the way.
fn way_in(work: &Path) -> std::io::Result<Option<WayIn>> {
    // Under a folder the task gets a private one of, the path is rebuilt in that one.
    let private = PRIVATE_TMP
        .iter()
        .map(Path::new)
        .chain([Path::new(PRIVATE_SHM)])
        .find(|p| work.starts_with(p));
    let (cover, below): (Option<PathBuf>, PathBuf) = match private {
        Some(private) => (None, private.to_path_buf()),
        None => match super::reach::first_closed_ancestor(work) {
            Some(closed) => (Some(closed.clone()), closed),
            None => return Ok(None),
        },
    };
    let mut make: Vec<&Path> = work.ancestors().take_while(|p| *p != below).collect();
    make.reverse();
    Ok(Some(WayIn {
        cover: cover.as_deref().map(c_path).transpose()?,
        make: make
            .into_iter()
            .map(c_path)
            .collect::<std::io::Result<_>>()?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_paths_are_written_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(fd_path(7, &mut buf), c"/proc/self/fd/7");
        assert_eq!(fd_path(1024, &mut buf), c"/proc/self/fd/1024");
        assert_eq!(fd_path(i32::MAX, &mut buf), c"/proc/self/fd/2147483647");
    }
}
