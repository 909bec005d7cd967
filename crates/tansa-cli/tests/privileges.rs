//! Nothing is read on behalf of a privileged user that the profiled user could not read:
//! root sampling another user's program embeds only the source files that user could read;
//! and an unprivileged user sampling another user's process is told exactly that.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use tansa_format::container::Reader;
use tansa_format::cpu::{SOURCES, SourceFile};

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Kills its child when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The source files embedded in the CPU recording `file`.
fn sources(file: &Path) -> Vec<String> {
    let mut r = Reader::new(std::fs::File::open(file).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        if f.ty == SOURCES {
            let files: Vec<SourceFile> = f.decode().unwrap();
            out.extend(files.into_iter().map(|s| s.path));
        }
    }
    out
}

#[test]
fn root_embeds_only_the_sources_the_profiled_user_can_read() {
    if !require(is_root(), "needs root to run a program as another user") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let open_c = dir.path().join("open.c");
    let secret_c = dir.path().join("secret.c");
    std::fs::write(
        &open_c,
        "double secret_work(long n);\n\
         __attribute__((noinline)) double open_work(long n) {\n\
             double x = 1; for (long i = 0; i < n; i++) x = x * 0.999999 + 1; return x; }\n\
         int main(void) { volatile long n = 3000000; volatile double s = 0;\n\
             for (;;) { s += open_work(n) + secret_work(n); }\n\
             return (int)s; }\n",
    )
    .unwrap();
    std::fs::write(
        &secret_c,
        "/* root's eyes only */\n\
         __attribute__((noinline)) double secret_work(long n) {\n\
             double x = 2; for (long i = 0; i < n; i++) x = x * 0.999999 + 1; return x; }\n",
    )
    .unwrap();
    let exe = dir.path().join("twofiles");
    compile(&exe, &[open_c.clone(), secret_c.clone()], &["-g", "-O1"]);
    std::fs::set_permissions(&open_c, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&secret_c, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = Running(
        Command::new(&exe)
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(Stdio::null())
            .spawn()
            .expect("run the program as nobody"),
    );
    std::thread::sleep(Duration::from_millis(100));
    let file = dir.path().join("rec.tansa");
    let out = run_tansa(&[
        "sample",
        "-p",
        &child.0.id().to_string(),
        "--duration",
        "1",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let embedded = sources(&file);
    let open = open_c.to_str().unwrap().to_string();
    let secret = secret_c.to_str().unwrap().to_string();
    assert!(
        embedded.contains(&open),
        "the readable source: {embedded:?}; {}",
        stderr(&out)
    );
    assert!(
        !embedded.contains(&secret),
        "a file nobody cannot read was embedded: {embedded:?}"
    );
}

#[test]
fn sampling_another_users_process_says_so() {
    let as_nobody = || {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(tansa())
            .arg("--version")
            .output()
    };
    if !require(
        is_root() && as_nobody().is_ok_and(|o| o.status.success()),
        "needs root, setpriv and a tansa binary that nobody can run",
    ) {
        return;
    }
    ensure_agent();
    let out_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(out_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sleeper = Running(Command::new("sleep").arg("30").spawn().unwrap());
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(tansa())
        .args([
            "sample",
            "-p",
            &sleeper.0.id().to_string(),
            "--duration",
            "0.2",
            "-o",
            out_dir.path().join("never.tansa").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "process {} belongs to user root (uid 0)",
            sleeper.0.id()
        )),
        "{err}"
    );
    assert!(!err.contains("seccomp"), "{err}");
}
