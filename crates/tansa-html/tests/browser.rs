//! Pages built from hand-made reports, loaded in headless Chromium: names that look like
//! markup stay text, and flame graphs given as SVG are embedded with their scripts running
//! (and their script errors reported on the page).

use std::path::{Path, PathBuf};

use tansa_analysis::cpu::CpuReport;
use tansa_analysis::cpu::report::CpuUnit;
use tansa_html::{CpuInput, FlameGraph, Limits, Page};
use tansa_testkit::browser::{self, errors_element, table_rows};

/// Chromium, which CI must have (`.ci/install-deps`); elsewhere the test says it did not
/// run.
fn chromium() -> Option<PathBuf> {
    let c = browser::chromium();
    if c.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is installed (.ci/install-deps): this precondition must hold in CI"
        );
        eprintln!("not run here: chromium is not installed");
    }
    c
}

const NASTY: &str = "lib</script><b>.so!f</script><b>";

fn report() -> CpuReport {
    let mut u = CpuUnit::new(NASTY.to_string(), 7, 9);
    u.self_percent = 70.0;
    u.total_percent = 90.0;
    CpuReport {
        schema: tansa_analysis::cpu::report::SCHEMA,
        by: "function",
        period_ns: 1_000_000,
        total_samples: 10,
        event: "cpu-clock".into(),
        source: "perf",
        target: "command".into(),
        kernel: false,
        cpus: 1,
        duration_ns: 10_000_000,
        lost_samples: 0,
        lost_records: 0,
        unsampled_ns: 0,
        pid: None,
        units: vec![u],
        notes: vec![],
        warnings: vec![],
    }
}

fn page(flame_graphs: &[FlameGraph]) -> Page {
    let r = report();
    tansa_html::cpu(
        &CpuInput {
            source: "x</script><b>.tansa",
            functions: &r,
            processes: &r,
            libraries: &r,
            annotations: &[],
        },
        flame_graphs,
        &Limits::default(),
    )
    .unwrap()
}

fn write(dir: &Path, name: &str, page: &Page) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).unwrap();
    page.write(&mut f).unwrap();
    path
}

/// A tiny flame graph whose script marks the page that embeds it (or throws).
fn svg(script: &str) -> String {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" \"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n\
         <svg version=\"1.1\" width=\"200\" height=\"40\" onload=\"init(evt)\" \
         xmlns=\"http://www.w3.org/2000/svg\"><script type=\"text/ecmascript\"><![CDATA[\
         function init(evt) {{ {script} }}]]></script>\
         <rect x=\"0\" y=\"0\" width=\"200\" height=\"40\" fill=\"#e96\"/>\
         <text id=\"t\" x=\"4\" y=\"24\">main</text></svg>"
    )
}

#[test]
fn markup_in_names_is_text_and_flame_graph_scripts_run() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ran = "document.getElementById('t').textContent = 'zoomed'; \
               parent.document.body.setAttribute('data-flame', \
               document.getElementById('t').textContent);";
    let p = page(&[FlameGraph {
        title: "CPU </script><b>".into(),
        svg: svg(ran),
    }]);
    let html = p.to_html();
    assert!(
        !html.contains("</script><b>"),
        "markup in names is escaped in the file"
    );
    let path = write(dir.path(), "page.html", &p);
    let loaded = browser::load(&chromium, &path, None);
    let dom = loaded.dom;
    assert_eq!(errors_element(&dom), Some(""), "no script error");
    assert!(
        loaded.console_errors.is_empty(),
        "{:?}",
        loaded.console_errors
    );
    let rows = table_rows(&dom, "functions");
    assert_eq!(rows[0][0], NASTY, "the name, as text");
    assert_eq!(rows[0][1], "7");
    assert!(!dom.contains("<b>.so"), "no element made from a name");
    assert!(
        dom.contains("data-flame=\"zoomed\""),
        "the flame graph's script ran"
    );
    assert!(dom.contains("<h3>CPU &lt;/script&gt;&lt;b&gt;</h3>"));
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-screenshots");
    std::fs::create_dir_all(&keep).unwrap();
    let png = keep.join("flame-embedded.png");
    browser::screenshot(&chromium, &path, &png);
    println!("screenshot: {}", png.display());
}

#[test]
fn flame_graph_script_errors_are_reported_and_none_given_is_said() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let p = page(&[FlameGraph {
        title: "broken".into(),
        svg: svg("no_such_function();"),
    }]);
    let path = write(dir.path(), "broken.html", &p);
    let dom = browser::load(&chromium, &path, None).dom;
    let errors = errors_element(&dom).unwrap();
    assert!(
        errors.contains("flame graph") && errors.contains("no_such_function"),
        "{errors}"
    );

    let path = write(dir.path(), "none.html", &page(&[]));
    let dom = browser::load(&chromium, &path, None).dom;
    assert_eq!(errors_element(&dom), Some(""));
    assert!(dom.contains("No flame graphs were given to this report."));
}
