//! `bl graph studio`: a manifest drawn and linted as it is typed, by
//! bl graph lint compiled to wasm, opened in real headless Chromium
//! through chromedriver. The studio must answer as `bl graph lint` does:
//! the same code and place for a broken manifest, and the same answer on
//! every case of the lint corpus.

use std::path::{Path, PathBuf};

use bl_e2e::repo_root;
use serde_json::{Value, json};

use crate::browser::{Driver, available};

fn bl(args: &[&str], dir: &Path) -> std::process::Output {
    bl_e2e::bl_in(dir, args)
}

fn corpus() -> PathBuf {
    repo_root().join("tests/corpus/graph/cases")
}

/// `bl graph studio --from manifest`, written into `dir`.
fn studio(dir: &Path, manifest: &Path) -> PathBuf {
    let page = dir.join("studio.html");
    let out = bl(
        &[
            "graph",
            "studio",
            "--from",
            manifest.to_str().unwrap(),
            "--out",
            page.to_str().unwrap(),
        ],
        dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    page
}

/// What `bl graph lint --json` prints for a file.
fn lint_json(file: &Path) -> Value {
    let out = bl(
        &["graph", "lint", "--json", file.to_str().unwrap()],
        Path::new("/"),
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: lint --json printed no JSON ({e}): {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

async fn open(client: &fantoccini::Client, page: &Path) {
    crate::browser::open(client, &format!("file://{}", page.display())).await;
}

/// The verdict line's text and what it says in data attributes.
async fn verdict(client: &fantoccini::Client) -> (String, Value) {
    let found = client
        .execute(
            "const v = document.getElementById('verdict'); return [v.textContent, {valid: v.dataset.valid, code: v.dataset.code, line: v.dataset.line, column: v.dataset.column}];",
            vec![],
        )
        .await
        .unwrap();
    (found[0].as_str().unwrap().to_string(), found[1].clone())
}

#[test]
fn a_broken_manifest_gets_lints_code_and_place_and_a_keystroke_that_fixes_it_draws_the_graph() {
    if !available(true) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(corpus().join("valid_all_kinds_yaml.yaml")).unwrap();
    let broken = good.replacen("kind: approval", "kind: approva", 1);
    let manifest = case.path().join("graph.yaml");
    std::fs::write(&manifest, &broken).unwrap();
    let want = lint_json(&manifest);
    assert_eq!(want["valid"], false, "{want}");
    assert!(
        want["line"].as_u64().is_some(),
        "lint gives a place: {want}"
    );
    let page = studio(case.path(), &manifest);
    let good_nodes = {
        let fixed = case.path().join("good.yaml");
        std::fs::write(&fixed, &good).unwrap();
        lint_json(&fixed)["node_ids"].as_array().map_or(0, Vec::len)
    };
    assert!(good_nodes > 0);

    let (before, stale, after, dry_run, gutter) = Driver::start().drive(async |client| {
        use fantoccini::Locator;
        open(client, &page).await;
        // The marks are drawn with the first lint; wait for them rather
        // than read a page a busy machine has not finished drawing.
        client
            .wait()
            .at_most(std::time::Duration::from_secs(30))
            .for_element(Locator::Css("#backdrop mark.bad"))
            .await
            .expect("the refused place is marked in the text");
        let before = verdict(client).await;
        let stale = client
            .execute("return document.getElementById('graph').className", vec![])
            .await
            .unwrap();
        // The lines the gutter marks as refused, by number.
        let marked = client
            .execute(
                "return [...document.querySelectorAll('#gutter .bad')].map((l) => [...l.parentNode.children].indexOf(l) + 1)",
                vec![],
            )
            .await
            .unwrap();
        // The refused place, highlighted in the text itself: line, column,
        // the word there, and drawn level with the gutter's mark.
        let inline = client
            .execute(
                "const g = document.querySelector('#gutter .bad'); return [...document.querySelectorAll('#backdrop mark.bad')].map((m) => [Number(m.dataset.line), Number(m.dataset.column), m.textContent, Math.abs(m.getBoundingClientRect().top - g.getBoundingClientRect().top) < 3])",
                vec![],
            )
            .await
            .unwrap();
        let marked = (marked, inline);
        // The fix is one keystroke: the text up to the missing letter is
        // put in place, and the letter is typed.
        let at = broken.find("kind: approva").unwrap() + "kind: approva".len();
        client
            .execute(
                "const t = document.getElementById('text'); t.value = arguments[0]; t.focus(); t.setSelectionRange(arguments[1], arguments[1]);",
                vec![json!(broken), json!(broken[..at].encode_utf16().count())],
            )
            .await
            .unwrap();
        client
            .find(Locator::Id("text"))
            .await
            .unwrap()
            .send_keys("l")
            .await
            .unwrap();
        // The keystroke's input event lints again; on a busy machine the
        // event may land after send_keys returns, so wait for its verdict.
        let relinted = client
            .wait()
            .at_most(std::time::Duration::from_secs(30))
            .for_element(Locator::Css(r#"#verdict[data-valid="true"]"#))
            .await;
        if relinted.is_err() {
            let typed = client
                .execute("return document.getElementById('text').value", vec![])
                .await
                .unwrap();
            panic!(
                "the keystroke did not fix the manifest: the verdict is {:?}, and the text {} the good manifest",
                verdict(client).await,
                if typed == json!(good) { "is" } else { "is not" }
            );
        }
        let after = verdict(client).await;
        let dry_run = client
            .find(Locator::Id("dryrun"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // The fixed graph drawn again, a box a node, no longer faded.
        let drawn = client
            .execute(
                "const g = document.getElementById('graph'); return [g.querySelectorAll('g.node').length, g.classList.contains('stale')]",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(drawn, json!([good_nodes, false]), "the fixed graph is drawn");
        // A node renamed is drawn under its new name, and renamed back,
        // under its old one: the page is sent each drawing it lacks, and
        // keeps the one it has.
        let renamed = good
            .replacen("- id: claim", "- id: claim2", 1)
            .replace("from_node: claim\n", "from_node: claim2\n")
            .replace("to_node: claim\n", "to_node: claim2\n");
        let mut names = Vec::new();
        for text in [&renamed, &good, &good] {
            let shown = client
                .execute(
                    "const t = document.getElementById('text'); t.value = arguments[0]; t.dispatchEvent(new Event('input')); const g = document.getElementById('graph'); return [document.getElementById('verdict').dataset.valid, ['claim', 'claim2'].filter((id) => g.querySelector(`[data-node=\"${id}\"]`))]",
                    vec![json!(text)],
                )
                .await
                .unwrap();
            names.push(shown);
        }
        assert_eq!(
            names,
            [json!(["true", ["claim2"]]), json!(["true", ["claim"]]), json!(["true", ["claim"]])],
            "each drawing follows the text"
        );
        let gutter = client
            .execute(
                "return document.querySelectorAll('#gutter .bad, #backdrop mark.bad').length",
                vec![],
            )
            .await
            .unwrap();
        (before, (stale, marked), after, dry_run, gutter)
    });
    let (stale, (marked, inline)) = stale;
    assert_eq!(
        marked,
        json!([want["line"]]),
        "the refused line, and only it, is marked"
    );
    let (line, column) = (
        want["line"].as_u64().unwrap() as usize,
        want["column"].as_u64().unwrap() as usize,
    );
    let word: String = broken.lines().nth(line - 1).unwrap()[column - 1..]
        .chars()
        .take_while(|c| !c.is_whitespace() && !",:[]{}\"'".contains(*c))
        .collect();
    assert!(!word.is_empty(), "lint points at a word");
    assert_eq!(
        inline,
        json!([[line, column, word, true]]),
        "the refused place is marked in the text, level with its line"
    );
    let (text, marks) = before;
    assert_eq!(marks["valid"], "false");
    assert_eq!(marks["code"], want["code"], "{text}");
    assert_eq!(marks["line"], want["line"].to_string(), "{text}");
    assert_eq!(marks["column"], want["column"].to_string(), "{text}");
    assert!(
        text.contains(want["message"].as_str().unwrap()),
        "{text}\n{want}"
    );
    assert!(stale.as_str().unwrap().contains("stale"), "{stale}");
    let (text, marks) = after;
    assert_eq!(marks["valid"], "true", "{text}");
    let fixed = case.path().join("fixed.yaml");
    std::fs::write(&fixed, &good).unwrap();
    assert!(
        text.contains(lint_json(&fixed)["digest"].as_str().unwrap()),
        "the studio's digest is lint's: {text}"
    );
    assert!(
        dry_run.contains("ok waits for a person with role editor"),
        "{dry_run}"
    );
    assert!(dry_run.contains("pub publishes under policy"), "{dry_run}");
    assert!(dry_run.contains("after approval by ok"), "{dry_run}");
    assert_eq!(gutter, json!(0), "no line is marked once it is fixed");
}

/// Every case of the lint corpus, linted in the browser and by
/// `bl graph lint --json`: the same object (code, pointer, message, line
/// and column for a refusal; digest, nodes and edges for a valid graph).
#[test]
fn the_studio_answers_as_bl_graph_lint_on_the_whole_corpus() {
    if !available(true) {
        return;
    }
    let mut cases: Vec<(PathBuf, &str)> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let format = match p.extension()?.to_str()? {
                "json" => "json",
                "yaml" | "yml" => "yaml",
                _ => return None,
            };
            Some((p, format))
        })
        .collect();
    cases.sort();
    assert!(cases.len() > 150, "{} cases", cases.len());
    let inputs: Vec<Value> = cases
        .iter()
        .map(|(p, f)| json!([String::from_utf8_lossy(&std::fs::read(p).unwrap()), f]))
        .collect();
    let case = tempfile::tempdir().unwrap();
    let page = studio(case.path(), &corpus().join("valid_chain_yaml.yaml"));
    let answers = Driver::start().drive(async |client| {
        open(client, &page).await;
        client
            .execute(
                "return arguments[0].map(([text, format]) => window.blStudio.lint(text, format).lint);",
                vec![Value::Array(inputs)],
            )
            .await
            .unwrap()
    });
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), cases.len());
    let mut differ = Vec::new();
    for ((path, _), got) in cases.iter().zip(answers) {
        let want = lint_json(path);
        if got != &want {
            differ.push(format!(
                "{}:\n  studio {got}\n  lint   {want}",
                path.display()
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// A JSON manifest is exported as YAML that lints to the same digest, and
/// the page is not blank.
#[test]
fn json_exports_as_yaml_that_lints_the_same_and_the_page_is_not_blank() {
    if !available(true) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let manifest = corpus().join("valid_all_kinds.json");
    let page = studio(case.path(), &manifest);
    let text = std::fs::read_to_string(&manifest).unwrap();
    let yaml = Driver::start().drive(async |client| {
        open(client, &page).await;
        crate::browser::assert_not_blank(client, "studio").await;
        client
            .execute(
                "return window.blStudio.yaml(arguments[0], 'json')",
                vec![json!(text)],
            )
            .await
            .unwrap()
    });
    let exported = case.path().join("exported.yaml");
    std::fs::write(&exported, yaml.as_str().unwrap()).unwrap();
    let (before, after) = (lint_json(&manifest), lint_json(&exported));
    assert_eq!(before["valid"], true, "{before}");
    assert_eq!(
        before["digest"],
        after["digest"],
        "{}",
        yaml.as_str().unwrap()
    );
}

/// A manifest the studio cannot read is named, with what it wants.
#[test]
fn a_manifest_it_cannot_read_is_named_with_what_it_wants() {
    let case = tempfile::tempdir().unwrap();
    let out = bl(&["graph", "studio", "--from", "nope.yaml"], case.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nope.yaml"), "{stderr}");
    let out = bl(&["graph", "studio", "--from", "graph.txt"], case.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(".yaml, .yml nor .json"), "{stderr}");
}
