use super::*;

const GOOD: &str = r#"
[settings]
retest_limit = 5
readings = 3
reading_interval = "20ms"
judge = ["pss", "fds"]

[thresholds]
memory = "128KiB"
fds = 2

[[process]]
name = "srv"
command = ["./srv", "--port-file", "port"]
ready_file = "port"
limit = "8MiB"

[[process]]
name = "db"
match = "memcached"
restart = "systemctl restart memcached"

[[log]]
file = "srv.log"
process = "srv"
id = 'E(\d+)'

[[item]]
name = "get"
command = "./client get {size} {n}"
timeout = "5s"

[[item.param]]
name = "size"
default = 4
min = 1
max = 100

[[item.param]]
name = "n"
default = 3
min = 0
max = 9
sweep = "linear"
step = 3

[[item]]
name = "list"
command = ["./client", "list", "{limit}"]
[[item.param]]
name = "limit"
default = 10

[idle]
duration = "10s"
interval = "2s"
"#;

fn err(text: &str) -> PlanError {
    match Plan::parse(text) {
        Ok(_) => panic!("plan was accepted:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn reads_a_full_plan() {
    let p = Plan::parse(GOOD).unwrap();
    assert_eq!(p.settings.retest_limit, 5);
    assert_eq!(p.settings.reading_interval, Duration::from_millis(20));
    assert_eq!(p.settings.thresholds.memory_bytes, 128 * 1024);
    assert_eq!(p.settings.thresholds.fds, 2);
    assert_eq!(p.processes.len(), 2);
    assert_eq!(p.processes[0].memory_limit, Some(8 << 20));
    assert!(p.processes[0].source.restartable());
    assert!(p.processes[1].source.restartable());
    assert_eq!(
        p.items[0].params[0].range.as_ref().unwrap().sweep,
        vec![1, 2, 4, 8, 16, 32, 64, 100]
    );
    assert_eq!(
        p.items[0].params[1].range.as_ref().unwrap().sweep,
        vec![0, 3, 6, 9]
    );
    assert!(p.items[1].params[0].range.is_none());
    assert_eq!(
        p.items[0].command.render(&p.items[0].defaults()),
        CommandSpec::Shell("./client get 4 3".into())
    );
    assert_eq!(
        p.items[1].command.render(&p.items[1].defaults()),
        CommandSpec::Argv(vec!["./client".into(), "list".into(), "10".into()])
    );
    assert_eq!(
        p.logs[0].id.captures("x E42 y").unwrap()[1].to_string(),
        "42"
    );
    assert_eq!(p.limit("srv", Resource::Pss), Some(8 << 20));
    assert_eq!(p.limit("db", Resource::Pss), None);
    assert_eq!(p.idle.unwrap().measurements(), 6);
}

/// The line number a bad plan is rejected at, and that the message mentions `word`.
fn line_of(text: &str, word: &str) -> usize {
    let e = err(text);
    assert!(
        e.message.contains(word),
        "message {:?} lacks {word:?}",
        e.message
    );
    e.line
}

#[test]
fn unknown_keys_are_rejected_at_their_line() {
    let text = "[[process]]\nname = \"a\"\npid = 1\ncolour = \"red\"\n[[item]]\nname = \"x\"\ncommand = \"true\"\n";
    assert_eq!(line_of(text, "colour"), 4);
    let text = "[setings]\nretest_limit = 3\n";
    assert_eq!(line_of(text, "setings"), 1);
    let text = "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true\"\n[[item.param]]\nname = \"p\"\ndefault = 1\nmaximum = 3\n";
    assert_eq!(line_of(text, "maximum"), 10);
}

#[test]
fn an_item_without_command_is_rejected_at_the_item() {
    let text = "[[process]]\nname = \"a\"\npid = 1\n\n[[item]]\nname = \"x\"\ntimeout = \"1s\"\n";
    let e = err(text);
    assert!(e.message.contains("no `command`"), "{e}");
    assert!((5..=6).contains(&e.line), "{e}");
}

#[test]
fn min_greater_than_max_is_rejected_at_min() {
    let text = "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true {p}\"\n[[item.param]]\nname = \"p\"\nmin = 10\nmax = 5\n";
    let e = err(text);
    assert_eq!(e.line, 9, "{e}");
    assert!(
        e.message.contains("min (10) is greater than max (5)"),
        "{e}"
    );
}

#[test]
fn bad_values_are_rejected_at_their_line() {
    let base = "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true\"\n";
    // Line 8 in each case.
    let cases = [
        ("[settings]\nretest_limit = 2\n", "at least 3"),
        ("[settings]\ntimeout = \"soon\"\n", "not a duration"),
        ("[settings]\njudge = [\"heap\"]\n", "heap"),
        ("[thresholds]\nmemory = \"lots\"\n", "not a size"),
        (
            "[idle]\nduration = \"1s\"\ninterval = \"2s\"\n",
            "longer than the duration",
        ),
    ];
    for (extra, word) in cases {
        let text = format!("{base}{extra}");
        let e = err(&text);
        assert!(e.message.contains(word), "{word}: {e}");
        assert!((7..=9).contains(&e.line), "{word}: {e}");
    }
}

#[test]
fn placeholders_must_name_parameters() {
    let text =
        "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"get {size}\"\n";
    assert_eq!(line_of(text, "{size}"), 6);
}

#[test]
fn process_needs_exactly_one_source() {
    assert_eq!(
        line_of(
            "[[process]]\nname = \"a\"\n[[item]]\nname = \"x\"\ncommand = \"true\"\n",
            "needs one of"
        ),
        2
    );
    assert_eq!(
        line_of(
            "[[process]]\nname = \"a\"\npid = 1\nmatch = \"b\"\n[[item]]\nname = \"x\"\ncommand = \"true\"\n",
            "more than one"
        ),
        2
    );
    assert_eq!(
        line_of(
            "[[process]]\nname = \"a\"\npid = 1\nready_file = \"x\"\n[[item]]\nname = \"x\"\ncommand = \"true\"\n",
            "ready_file"
        ),
        4
    );
}

#[test]
fn sweeps_are_checked() {
    let base = "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true {p}\"\n[[item.param]]\nname = \"p\"\n";
    for (extra, word) in [
        ("min = 0\nmax = 8\n", "min >= 1"),
        ("min = 1\nmax = 8\nsteps = [1, 4, 2]\n", "ascending"),
        ("min = 1\nmax = 8\nsteps = [1, 9]\n", "within"),
        ("min = 1\nmax = 8\nsweep = \"linear\"\n", "needs `step`"),
        ("min = 1\nmax = 8\nsweep = \"random\"\n", "unknown sweep"),
        ("min = 1\nmax = 8\ndefault = 9\n", "outside"),
        ("min = 1\n", "no `max`"),
        ("steps = [1]\ndefault = 1\n", "needs `min` and `max`"),
    ] {
        let e = err(&format!("{base}{extra}"));
        assert!(e.message.contains(word), "{word}: {e}");
        assert!(e.line >= 7, "{word}: {e}");
    }
}

#[test]
fn nothing_to_watch_or_run_is_rejected() {
    assert!(
        err("[[item]]\nname = \"x\"\ncommand = \"true\"\n")
            .message
            .contains("no process")
    );
    assert!(
        err("[[process]]\nname = \"a\"\npid = 1\n")
            .message
            .contains("nothing to run")
    );
}

#[test]
fn logs_name_their_process() {
    let base = "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true\"\n";
    assert!(
        err(&format!("{base}[[log]]\nfile = \"x.log\"\n"))
            .message
            .contains("process")
    );
    assert!(
        err(&format!("{base}[[log]]\noutput = \"a\"\n"))
            .message
            .contains("not started")
    );
    assert!(
        err(&format!(
            "{base}[[log]]\njournal = true\nfile = \"f\"\nprocess = \"a\"\n"
        ))
        .message
        .contains("more than one")
    );
    assert!(
        err(&format!("{base}[[log]]\njournal = true\nerror = \"(\"\n"))
            .message
            .contains("regular expression")
    );
    let p = Plan::parse(&format!("{base}[[log]]\njournal = true\n")).unwrap();
    assert_eq!(p.logs[0].kind, LogKind::Journal);
}

#[test]
fn durations_beyond_a_year_are_rejected_at_their_line() {
    const HUGE: &str = "\"18446744073709551615s\"";
    // A process's start timeout (line 4), an item's timeout (line 8), the default timeout,
    // the settle times and the idle test: each at its own line.
    let text = format!(
        "[[process]]\nname = \"a\"\ncommand = \"true\"\nstart_timeout = {HUGE}\n[[item]]\nname = \"x\"\ncommand = \"true\"\n"
    );
    assert_eq!(line_of(&text, "longer than"), 4);
    let text = format!(
        "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true\"\n\ntimeout = {HUGE}\n"
    );
    assert_eq!(line_of(&text, "18446744073709551615s"), 8);
    let base = "[[process]]\nname = \"a\"\npid = 1\n[[item]]\nname = \"x\"\ncommand = \"true\"\n";
    for key in ["timeout", "settle", "reading_interval"] {
        let text = format!("{base}[settings]\n{key} = {HUGE}\n");
        assert_eq!(line_of(&text, "longer than"), 8, "{key}");
    }
    let text = format!("{base}[idle]\nduration = {HUGE}\ninterval = \"1s\"\n");
    assert_eq!(line_of(&text, "longer than"), 8);
    // A year itself is fine.
    let text = format!("{base}[settings]\ntimeout = \"365days\"\n");
    assert!(Plan::parse(&text).is_ok());
}
