//! The console's files, built into the binary: plain HTML, CSS and JavaScript modules
//! with no build step, so what is in `crates/baton-server/ui/` is what the browser runs.

/// One file of the console, served at `/ui/{path}`.
pub(super) struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
/// Module scripts are refused by browsers under any other type when `nosniff` is set.
const JS: &str = "text/javascript; charset=utf-8";

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            body: include_str!(concat!("../../ui/", $path)),
        }
    };
}

/// The page, served at `/ui/` (its one address).
pub(super) const INDEX: &Asset = &asset!("index.html", HTML);

/// Every other file, each at `/ui/{path}`. A new file in `ui/` must be listed here (a
/// test checks).
pub(super) const ASSETS: &[Asset] = &[
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("access.js", JS),
    asset!("session.js", JS),
    asset!("sse.js", JS),
    asset!("events.js", JS),
    asset!("ansi.js", JS),
    asset!("log_follow.js", JS),
    asset!("dom.js", JS),
    asset!("time.js", JS),
    asset!("watch.js", JS),
    asset!("task_actions.js", JS),
    asset!("trace.js", JS),
    asset!("task_ref.js", JS),
    asset!("find_task.js", JS),
    asset!("table_sort.js", JS),
    asset!("elapsed.js", JS),
    asset!("attempts.js", JS),
    asset!("log_lines.js", JS),
    asset!("log_view.js", JS),
    asset!("log_search.js", JS),
    asset!("log_panel.js", JS),
    asset!("shell_words.js", JS),
    asset!("task_fields.js", JS),
    asset!("task_form.js", JS),
    asset!("cron_words.js", JS),
    asset!("trend_chart.js", JS),
    asset!("pipeline_graph.js", JS),
    asset!("pages/sign_in.js", JS),
    asset!("pages/tasks.js", JS),
    asset!("pages/task.js", JS),
    asset!("pages/new_task.js", JS),
    asset!("pages/runners.js", JS),
    asset!("pages/nodes.js", JS),
    asset!("pages/queues.js", JS),
    asset!("pages/schedules.js", JS),
    asset!("pages/schedule_form.js", JS),
    asset!("pages/pipelines.js", JS),
    asset!("pages/pipeline.js", JS),
];

#[cfg(test)]
mod tests {
    use super::{ASSETS, INDEX};
    use std::path::{Path, PathBuf};

    fn files_under(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("the ui folder") {
            let path: PathBuf = entry.expect("an entry").path();
            if path.is_dir() {
                files_under(&path, root, out);
            } else {
                let relative = path.strip_prefix(root).expect("under the root");
                out.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    /// A file left out of the table would be a 404 in the browser, seen only there.
    #[test]
    fn every_file_of_the_console_is_served() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut on_disk = Vec::new();
        files_under(&root, &root, &mut on_disk);
        on_disk.sort();
        let mut served: Vec<String> = std::iter::once(INDEX)
            .chain(ASSETS)
            .map(|a| a.path.to_string())
            .collect();
        served.sort();
        assert_eq!(on_disk, served);
    }
}
