//! `tansa sample` run as root reads nothing on a sampled process's behalf that the
//! process's user could not read: a program run as `nobody` whose line table names a
//! root-only file (`#line 1 "<that file>"`) does not get that file's text into the
//! recording, whether the whole machine is sampled (`-a`, where root's processes are
//! sampled too) or its process is named with a root process (`-p NOBODY,ROOT`) or alone.
//! The program's other source file, which nobody may read, is embedded (the control).
//! Nor does a program's debugging information come from a root-only file that its debug
//! link names (itself, or through a symbolic link that leads to it).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{compile, have, require, stderr, tansa};

/// The tests of this file one at a time: each runs programs as `nobody` and samples as
/// root, one of them the whole machine (`-a`), which would sample the other's programs and
/// tools too. (Once, in a CI run, the `-a` case found the root-only file's text in its
/// recording while the other test ran beside it; it was not seen again in 10 runs.)
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The secret's text: in the root-only file only.
const SECRET: &str = "root-only-secret-7f3a9c: do not copy";
/// The readable source's text, as the control.
const PUBLIC: &str = "public-source-line-51be0d";

/// A program whose hot function `secret_f` is, by its line table, in `secret`, and
/// `public_g` in `public` (compiled with `cc -g -O0`). It prints `ready` once running, then
/// spins until killed.
fn program_source(secret: &Path, public: &Path) -> String {
    format!(
        r#"#include <stdio.h>
#include <unistd.h>
volatile unsigned long sink;
#line 1 "{secret}"
__attribute__((noinline)) void secret_f(void) {{
    for (unsigned long i = 0; i < 2000000; i++) sink += i;
}}
#line 1 "{public}"
__attribute__((noinline)) void public_g(void) {{
    for (unsigned long i = 0; i < 2000000; i++) sink ^= i;
}}
int main(void) {{
    printf("ready\n");
    fflush(stdout);
    for (;;) {{ secret_f(); public_g(); }}
}}
"#,
        secret = secret.display(),
        public = public.display()
    )
}

/// A child killed when the test ends, passed or not (the program spins for ever).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn as_nobody(program: &Path) -> Killed {
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run setpriv");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    Killed(child)
}

/// Samples with `args` into `file`, then checks that the recording holds the public text
/// but not the secret, and that annotation says why the secret's source is not shown.
fn check(file: &Path, args: &[&str], secret: &Path) {
    let mut cmd = Command::new(tansa());
    cmd.arg("sample").args(args).arg("-o").arg(file);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    // The file's bytes (large frames are compressed: their decoded text too).
    let bytes = std::fs::read(file).unwrap();
    assert!(
        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "{args:?}: the root-only file's text is in the recording's bytes"
    );
    let rec = tansa_analysis::cpu::CpuRecording::open(&bytes[..]).unwrap();
    let sources: Vec<&str> = rec.sources.iter().map(|s| s.text.as_str()).collect();
    assert!(
        !sources.iter().any(|t| t.contains(SECRET)),
        "{args:?}: the root-only file's text is in the recording (sources {:?}, withheld {:?}, \
         notes {:?})",
        rec.sources.iter().map(|s| &s.path).collect::<Vec<_>>(),
        rec.withheld_sources,
        rec.info.notes
    );
    assert!(
        sources.iter().any(|t| t.contains(PUBLIC)),
        "{args:?}: the readable source is not in the recording"
    );
    let html = file.with_extension("html");
    let out = Command::new(tansa())
        .args(["html", file.to_str().unwrap(), "-o", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    assert!(
        !std::fs::read_to_string(&html).unwrap().contains(SECRET),
        "{args:?}: the root-only file's text is in the HTML page"
    );
    let annotate = |function: &str| {
        let out = Command::new(tansa())
            .args(["annotate", file.to_str().unwrap(), function, "--source"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listing = annotate("secret_f");
    assert!(!listing.contains(SECRET), "{args:?}: {listing}");
    let head = listing
        .lines()
        .find(|l| l.starts_with(secret.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{args:?}: no block for the secret file: {listing}"));
    assert!(
        head.contains("not in the recording") && head.contains("user 65534"),
        "{args:?}: {head}"
    );
    let listing = annotate("public_g");
    assert!(listing.contains(PUBLIC), "{args:?}: {listing}");
    let report = Command::new(tansa())
        .args(["report", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout).into_owned() + &stderr(&report);
    assert!(
        text.contains("source file(s) is not in the recording"),
        "{args:?}: {text}"
    );
}

#[test]
fn a_root_only_file_named_by_an_unprivileged_program_is_not_embedded() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !require(
        root && Command::new("setpriv").arg("--version").output().is_ok(),
        "needs root and setpriv to run a program as nobody",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.path().join("secret.c");
    std::fs::write(&secret, format!("{SECRET}\n{SECRET}\n{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let public = dir.path().join("public.c");
    std::fs::write(&public, format!("{PUBLIC}\n{PUBLIC}\n{PUBLIC}\n")).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let src = dir.path().join("prog.c");
    std::fs::write(&src, program_source(&secret, &public)).unwrap();
    let prog = dir.path().join("prog");
    compile(&prog, &[src], &["-g", "-O0"]);
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = as_nobody(&prog);
    // A root process sampled with it (besides tansa itself, sampled by `-a`).
    let rooted = Killed(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = nobody.0.id().to_string();
    let both = format!("{pid},{}", rooted.0.id());
    let cases: [(&str, Vec<&str>); 3] = [
        ("all", vec!["-a", "--duration", "1"]),
        ("pids", vec!["-p", &both, "--duration", "0.6"]),
        ("pid", vec!["-p", &pid, "--duration", "0.6"]),
    ];
    for (name, args) in &cases {
        check(&dir.path().join(format!("{name}.tansa")), args, &secret);
    }
}

/// A function name found only in the program's separate debug file.
const DEBUG_ONLY_NAME: &str = "debug_only_fn_9a7c";

/// Samples `pid` as root into `file` and returns the report by function and by line, with
/// its notes.
fn reports(file: &Path, pid: u32) -> String {
    let out = Command::new(tansa())
        .args(["sample", "-p", &pid.to_string(), "--duration", "0.6", "-o"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut text = String::new();
    for by in ["function", "line"] {
        let out = Command::new(tansa())
            .args(["report", file.to_str().unwrap(), "--by", by])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        text += &String::from_utf8_lossy(&out.stdout);
        text += &stderr(&out);
    }
    text
}

#[test]
fn a_root_only_debug_file_named_by_an_unprivileged_program_is_not_read() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !require(
        root && have("setpriv") && have("objcopy") && have("strip"),
        "needs root, setpriv, objcopy and strip",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = dir.path().join("prog.c");
    std::fs::write(
        &src,
        format!(
            r#"#include <stdio.h>
volatile unsigned long sink;
__attribute__((noinline)) void {DEBUG_ONLY_NAME}(void) {{
    for (unsigned long i = 0; i < 2000000; i++) sink += i;
}}
int main(void) {{
    printf("ready\n");
    fflush(stdout);
    for (;;) {DEBUG_ONLY_NAME}();
}}
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The program keeps its exported symbols only; its names and lines are in prog.debug,
    // which its debug link names.
    let prog = dir.path().join("prog");
    compile(&prog, &[src], &["-g", "-O0"]);
    let debug = dir.path().join("prog.debug");
    let run = |tool: &str, args: &[&std::ffi::OsStr]| {
        let out = Command::new(tool).args(args).output().unwrap();
        assert!(out.status.success(), "{tool}: {}", stderr(&out));
    };
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            prog.as_os_str(),
            debug.as_os_str(),
        ],
    );
    run("strip", &["--strip-all".as_ref(), prog.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run("objcopy", &[link.as_ref(), prog.as_os_str()]);
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = as_nobody(&prog);
    let pid = nobody.0.id();
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };

    // Readable by nobody: the control, named from the debug file.
    mode(&debug, 0o644);
    let text = reports(&dir.path().join("readable.tansa"), pid);
    assert!(text.contains(DEBUG_ONLY_NAME), "{text}");
    assert!(text.contains("prog.c:4"), "{text}");

    // Root's alone: not read, and the report says why.
    mode(&debug, 0o600);
    let file = dir.path().join("private.tansa");
    let text = reports(&file, pid);
    assert!(!text.contains(DEBUG_ONLY_NAME), "{text}");
    assert!(!text.contains("prog.c"), "{text}");
    assert!(
        text.contains("not read from the file(s) next to them") && text.contains("user 65534"),
        "{text}"
    );
    let bytes = std::fs::read(&file).unwrap();
    let rec = tansa_analysis::cpu::CpuRecording::open(&bytes[..]).unwrap();
    assert!(
        !format!("{:?}", rec.symbols).contains(DEBUG_ONLY_NAME),
        "the debug file's names are in the recording"
    );

    // Readable itself, but reached through a link into a directory nobody may search.
    let hidden = tempfile::tempdir().unwrap();
    mode(hidden.path(), 0o700);
    let target = hidden.path().join("prog.debug");
    std::fs::rename(&debug, &target).unwrap();
    mode(&target, 0o644);
    std::os::unix::fs::symlink(&target, &debug).unwrap();
    let text = reports(&dir.path().join("linked.tansa"), pid);
    assert!(!text.contains(DEBUG_ONLY_NAME), "{text}");
    assert!(
        text.contains("not read from the file(s) next to them"),
        "{text}"
    );
}
