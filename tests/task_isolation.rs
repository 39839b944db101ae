//! A task is untrusted code: it must not become its runner. A runner agent started as
//! root runs each slot as a user of its own; these tasks try, from their own shell, every
//! way a task could once reach its runner's identity or a sibling's secrets, and get
//! nothing.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// Prints `<what>: read` when `<command>` succeeds with output, `<what>: denied` otherwise.
fn attempt(what: &str, command: &str) -> String {
    format!(
        "if out=$({command} 2>/dev/null) && [ -n \"$out\" ]; then echo \"{what}: read\"; else echo \"{what}: denied\"; fi\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_reaches_neither_its_runners_identity_nor_its_siblings_secrets() {
    let env = TestEnv::new("task-isolation").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let agent = env.runner(&node.url, &["iso"], 2).await;
    let secret = format!("sibling-secret-{}", Uuid::new_v4().simple());
    let (sibling, _) = user
        .submit(&SubmitTask {
            labels: vec!["iso".into()],
            script: Some("echo started > \"$HOME/marker\"; sleep 30".into()),
            secret_env: [("SIBLING_SECRET".to_string(), secret.clone())].into(),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    wait_for("the sibling to run", Duration::from_secs(30), || async {
        let t = user.task_get(sibling.id).await.ok()?;
        (t.status == TaskStatus::Running).then_some(())
    })
    .await;

    let state = agent.state_dir.display().to_string();
    let work = procs::work_dir_of(&agent.state_dir).display().to_string();
    let mut script = String::from("echo \"uid: $(id -u)\"\n");
    script += &attempt("the runner token", &format!("cat {state}/runner.json"));
    script += &attempt("the state dir", &format!("ls {state}"));
    script += &attempt("the agent's environment", "cat /proc/$PPID/environ");
    script += &attempt("the agent's memory map", "cat /proc/$PPID/maps");
    script += &attempt("the first process's environment", "cat /proc/1/environ");
    script += &attempt("the work dirs", &format!("ls {work}"));
    script += &attempt("a sibling's work dir", &format!("cat {work}/*/marker"));
    script += &attempt(
        "a sibling's secret",
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep SIBLING_SECRET",
    );
    script += &attempt("the registration token", "env | grep REGISTRATION");
    // The agent runs with RUST_LOG set: the task's environment is an allow-list.
    script += &attempt(
        "the agent's environment, passed on",
        "env | grep -e ^RUST_LOG -e ^BATON_SERVER -e TOKEN",
    );
    let (attacker, _) = user
        .submit(&SubmitTask {
            labels: vec!["iso".into()],
            script: Some(script),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, attacker.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    let output = String::from_utf8_lossy(&read_log(&user, attacker.id).await).into_owned();
    assert!(!output.contains(&secret), "the secret leaked:\n{output}");
    let uid: u32 = output
        .lines()
        .find_map(|l| l.strip_prefix("uid: "))
        .and_then(|u| u.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in:\n{output}"));
    assert_ne!(
        uid, 0,
        "the task runs as another user than the agent:\n{output}"
    );
    let read: Vec<&str> = output.lines().filter(|l| l.ends_with(": read")).collect();
    assert!(read.is_empty(), "a task reached {read:?}:\n{output}");
    assert_eq!(
        output.lines().filter(|l| l.ends_with(": denied")).count(),
        10,
        "every attempt ran:\n{output}"
    );
    user.task_cancel(sibling.id).await.unwrap();
}

/// A task that prints its secret — on purpose, or in a stack trace — leaves `***` in its
/// stored log, not the value.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_a_task_prints_is_masked_in_its_log() {
    let env = TestEnv::new("task-secret-masked").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let _agent = env.runner(&node.url, &["mask"], 1).await;
    let secret = format!("s3cr3t-{}", Uuid::new_v4().simple());
    let (task, _) = user
        .submit(&SubmitTask {
            labels: vec!["mask".into()],
            // Half on stdout, whole on stderr, and split across two writes.
            script: Some(
                "echo \"token=$API_KEY\"; echo \"$API_KEY\" >&2; \
                 printf '%s' \"$API_KEY\" | cut -c1-6 | tr -d '\\n'; \
                 printf '%s\\n' \"$API_KEY\" | cut -c7-"
                    .into(),
            ),
            secret_env: [("API_KEY".to_string(), secret.clone())].into(),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    let log = String::from_utf8_lossy(&read_log(&user, task.id).await).into_owned();
    assert!(!log.contains(&secret), "the secret is in the log:\n{log}");
    assert!(log.contains("token=***"), "{log}");
    assert!(
        log.matches("***").count() >= 3,
        "every print masked:\n{log}"
    );
}

/// The uid of a task's output line `uid: N`.
fn uid_in(output: &str) -> u32 {
    output
        .lines()
        .find_map(|l| l.strip_prefix("uid: "))
        .and_then(|u| u.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in:\n{output}"))
}

/// The pids of every process on this host whose real uid is `uid` (read from
/// `/proc/<pid>/status`, which shows it for non-dumpable processes too).
fn processes_of(uid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let real: u32 = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            (real == uid).then_some(pid)
        })
        .collect()
}

/// Submits `script` on `labels` (with `secret_env`), waits for its end and returns its
/// output; it must succeed.
async fn run_script(
    env: &TestEnv,
    user: &baton_client::Client,
    labels: &str,
    script: String,
    secret_env: std::collections::BTreeMap<String, String>,
) -> String {
    let (task, _) = user
        .submit(&SubmitTask {
            labels: vec![labels.into()],
            script: Some(script),
            secret_env,
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(user, task.id).await;
    let output = String::from_utf8_lossy(&read_log(user, task.id).await).into_owned();
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}\n{output}");
    output
}

/// The attack from the security review: a task leaves a reader in a session of its own,
/// a daemon out of a double fork and one that made itself non-dumpable (in `/proc` it
/// shows as root's), and files in every shared scratch folder, then exits. The next task on the same runner (one slot: it runs where the first ran)
/// carries another tenant's secret. Nothing of the first may be left when it ends: no
/// process of its uid, no file the next one sees, and the secret in no leftover's hands.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_a_task_leaves_running_reaches_the_next_task() {
    let env = TestEnv::new("task-leftovers").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let _agent = env.runner(&node.url, &["left"], 1).await;
    // What a task left running would send what it reads to.
    let drop = dir_tasks_may_write("leftover-drop");
    let stolen = drop.join("environ");
    let attack = format!(
        "echo \"uid: $(id -u)\"\n\
         setsid sh -c 'while :; do cat /proc/[0-9]*/environ >> {stolen} 2>/dev/null; sleep 0.1; done' \
           </dev/null >/dev/null 2>&1 &\n\
         sh -c '(sleep 300 </dev/null >/dev/null 2>&1 &) &'\n\
         setsid python3 -c 'import ctypes,time; ctypes.CDLL(None).prctl(4, 0); time.sleep(300)' \
           </dev/null >/dev/null 2>&1 &\n\
         echo left > /tmp/left; echo left > /var/tmp/left; echo left > /dev/shm/left\n\
         sleep 0.5\n",
        stolen = stolen.display()
    );
    let attacker = uid_in(&run_script(&env, &user, "left", attack, Default::default()).await);
    // Its end is reported only once nothing of it runs.
    assert_eq!(
        processes_of(attacker),
        Vec::<u32>::new(),
        "the task's leftovers outlived it"
    );

    let secret = format!("next-tenant-secret-{}", Uuid::new_v4().simple());
    let victim = run_script(
        &env,
        &user,
        "left",
        "echo \"uid: $(id -u)\"; ls -A /tmp /var/tmp /dev/shm; sleep 1\n".into(),
        [("NEXT_SECRET".to_string(), secret.clone())].into(),
    )
    .await;
    assert_ne!(uid_in(&victim), attacker, "a uid went to a second task");
    assert!(
        !victim.contains("left"),
        "the next task sees what the first left in its scratch folders:\n{victim}"
    );
    let read = std::fs::read_to_string(&stolen).unwrap_or_default();
    assert!(
        !read.contains(&secret),
        "a leftover read the next task's secret"
    );
    let _ = std::fs::remove_dir_all(drop);
}

/// A fork bomb stops at the task's process limit, and ends with its task: the task after
/// it finds none of its processes and runs at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_bomb_is_bounded_and_gone_with_its_task() {
    let env = TestEnv::new("task-fork-bomb").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let _agent = env
        .runner_with(&node.url, &["bomb"], 1, &["--task-max-processes", "64"])
        .await;
    // The count needs forks of its own while the bomb holds every process it may have:
    // tried until one gets through (`echo`, `[` and the loop are the shell's own).
    let bomb = "me=$(id -u)\n\
                echo \"uid: $me\"\n\
                bomb() { bomb | bomb & }\n\
                bomb 2>/dev/null\n\
                sleep 2\n\
                n=; tries=0\n\
                while [ -z \"$n\" ] && [ $tries -lt 1000 ]; do\n\
                n=$(ps -eo uid= 2>/dev/null | grep -c \"^ *$me$\" 2>/dev/null); tries=$((tries+1))\n\
                done 2>/dev/null\n\
                echo \"at most $n processes\"\n";
    let output = run_script(&env, &user, "bomb", bomb.into(), Default::default()).await;
    let bomber = uid_in(&output);
    let most: usize = output
        .lines()
        .find_map(|l| l.strip_prefix("at most ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count in:\n{output}"));
    assert!(most <= 64, "the bomb went past its limit: {most}");
    assert_eq!(
        processes_of(bomber),
        Vec::<u32>::new(),
        "the bomb outlived its task"
    );
    let after = run_script(
        &env,
        &user,
        "bomb",
        "echo \"uid: $(id -u)\"\n".into(),
        Default::default(),
    )
    .await;
    assert_ne!(uid_in(&after), bomber);
}

/// A root runner whose state and work dirs lie under folders only their owner may enter
/// (a checkout under /root; a `mktemp -d` under /tmp) runs its tasks: each gets into its
/// work dir by its path, writes there, and has a /tmp of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_root_runner_under_a_private_folder_runs_its_tasks() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new("task-private-folder").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let closed = |parent: std::path::PathBuf| {
        let dir = parent.join(format!("closed-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    };
    let (home, mktemp) = (
        closed(procs::target_tmp_dir()),
        closed(std::env::temp_dir()),
    );
    let mut runners = Vec::new();
    for (label, parent) in [("in-home", &home), ("in-tmp", &mktemp)] {
        let state = parent.join("checkout/.runner");
        runners.push(RunnerProc::start(&env, &node.url, &[label], 1, &[], Some(&state), &[]).await);
    }
    for label in ["in-home", "in-tmp"] {
        let output = run_script(
            &env,
            &user,
            label,
            // Its /tmp holds nothing but, under /tmp, the way to its own work dir.
            "cd \"$PWD\" && echo written > file && cat \"$PWD/file\" && pwd \
             && ls -A /tmp | grep -vc '^closed-' || true\n"
                .into(),
            Default::default(),
        )
        .await;
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.first(), Some(&"written"), "{label}:\n{output}");
        assert_eq!(
            lines.last(),
            Some(&"0"),
            "{label}: /tmp is not the task's own:\n{output}"
        );
    }
    drop(runners);
    let _ = std::fs::remove_dir_all(home);
    let _ = std::fs::remove_dir_all(mktemp);
}

/// Where a task could not get into its work dir at all — a folder above it closed to
/// others, and no mount namespace for the agent to open a way (no `CAP_SYS_ADMIN`) — the
/// runner refuses to start, naming the folder and the fix, instead of failing every task.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_whose_tasks_could_not_reach_their_work_dir_refuses_to_start() {
    use std::os::unix::fs::PermissionsExt;
    let closed = procs::target_tmp_dir().join(format!("closed-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("setpriv")
            .args(["--bounding-set=-sys_admin", "--inh-caps=-sys_admin"])
            .arg(procs::baton_binary())
            .args(["runner", "--server", "http://127.0.0.1:9", "--labels", "x"])
            .args(["--registration-token", "unused"])
            .arg("--state-dir")
            .arg(closed.join("state"))
            .arg("--work-dir")
            .arg(closed.join("work"))
            .output(),
    )
    .await
    .expect("the runner decides at start")
    .expect("run the runner under setpriv");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("{} lets no other user through", closed.display()))
            && said.contains(&format!("chmod o+x {}", closed.display())),
        "the refusal names the folder and the fix:\n{said}"
    );
    let _ = std::fs::remove_dir_all(closed);
}
