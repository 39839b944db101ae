//! The `sandbox` backend's walls (docs/dynamic-runners.md): a runner started by the
//! `process` backend, but inside fresh Linux namespaces made by bubblewrap (`bwrap`) —
//! its own mounts on a throw-away root holding the host's system folders read-only and
//! its own folder read-write, its own PIDs, and a network with nothing in it but a relay
//! to the server's address (`baton relay`). So a task sees nothing of the host beyond the
//! runner's folder and reaches nothing but the server. The agent inside runs as root, and
//! each task as a fresh uid of its own, as on a host.

use std::ffi::OsString;
use std::path::Path;

/// Where the runner's folder is inside the sandbox.
pub(super) const INSIDE: &str = "/baton";
/// Where the `baton` binary is inside the sandbox.
const EXE_INSIDE: &str = "/opt/baton/baton";
/// The relay's socket, in the runner's folder (outside) and under [`INSIDE`] (inside).
pub(super) const RELAY_SOCKET: &str = "relay.sock";
/// Where the relay inside listens: the server's address as the runner sees it. A
/// privileged port, so a task (an unprivileged uid) can never listen there itself.
pub(super) const SERVER_INSIDE: &str = "127.0.0.1:80";
/// The host's folder where root runners claim their blocks of task uids
/// (`baton_runner::isolation::uids`): shared with every sandbox, so no two runners on the
/// host, sandboxed or not, run tasks as the same uid.
const UID_BLOCKS: &str = "/run/baton-runner";

/// The host's system folders, read-only inside; a merged-/usr host's `/bin`, `/lib`...
/// are symlinks, made the same inside.
const SYSTEM: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];
/// The few files of `/etc` a process needs to start, name users and check a server's
/// certificate (the public CA roots); nothing else of it (private keys, passwords, the
/// node's settings) is there.
const ETC: &[&str] = &[
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/alternatives",
];

/// `bwrap`'s arguments to run `command` (argv, inside) in a sandbox around `folder`,
/// with the host's `exe` as [`EXE_INSIDE`].
pub(super) fn bwrap_args(exe: &Path, folder: &Path, command: &[String]) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "baton-sandbox",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
    ]
    .map(OsString::from)
    .to_vec();
    for dir in SYSTEM {
        match std::fs::read_link(dir) {
            Ok(target) => args.extend(["--symlink".into(), target.into(), (*dir).into()]),
            Err(_) if Path::new(dir).is_dir() => {
                args.extend(["--ro-bind".into(), (*dir).into(), (*dir).into()])
            }
            Err(_) => {}
        }
    }
    for file in ETC {
        args.extend(["--ro-bind-try".into(), (*file).into(), (*file).into()]);
    }
    // Made if missing, so the bind below never fails: the runner fills it.
    let _ = std::fs::create_dir_all(UID_BLOCKS);
    args.extend(["--bind".into(), UID_BLOCKS.into(), UID_BLOCKS.into()]);
    args.extend([
        "--ro-bind".into(),
        exe.into(),
        EXE_INSIDE.into(),
        "--bind".into(),
        folder.into(),
        INSIDE.into(),
        "--chdir".into(),
        INSIDE.into(),
        "--".into(),
    ]);
    args.extend(command.iter().map(OsString::from));
    args
}

/// The command run inside: the relay in the background, then the runner, which talks to
/// the server through it.
pub(super) fn inside(runner_args: &[String]) -> Vec<String> {
    let quoted: Vec<String> = runner_args.iter().map(|a| shell_quote(a)).collect();
    let script = format!(
        "{EXE_INSIDE} relay --listen-tcp {SERVER_INSIDE} --to-unix {INSIDE}/{RELAY_SOCKET} & \
         exec {EXE_INSIDE} runner {}",
        quoted.join(" ")
    );
    vec!["/bin/sh".into(), "-c".into(), script]
}

fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_inside_talks_through_the_relay() {
        let command = inside(&["--name".into(), "it's".into()]);
        assert_eq!(command[0], "/bin/sh");
        assert!(
            command[2].contains("relay --listen-tcp 127.0.0.1:80 --to-unix /baton/relay.sock &")
        );
        assert!(command[2].ends_with(r"runner '--name' 'it'\''s'"));
        let args = bwrap_args(Path::new("/x/baton"), Path::new("/r/one"), &command);
        let text: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = |flag: &str| text.iter().position(|a| a == flag).unwrap();
        assert!(text.contains(&"--unshare-net".to_string()));
        let binds: Vec<[&str; 2]> = text
            .windows(3)
            .filter(|w| w[0] == "--bind")
            .map(|w| [w[1].as_str(), w[2].as_str()])
            .collect();
        assert_eq!(
            binds,
            [
                ["/run/baton-runner", "/run/baton-runner"],
                ["/r/one", "/baton"]
            ],
            "read-write: the host's uid blocks and the runner's folder, nothing else"
        );
        assert!(
            !text
                .iter()
                .any(|a| a == "/root" || a == "/etc" || a == "/home")
        );
        assert_eq!(text[at("--") + 1], "/bin/sh");
    }
}
