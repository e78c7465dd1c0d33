//! `bl sandbox run | probe` and `bl doctor` through the real binary, with
//! real bubblewrap. Skips loudly where bwrap cannot run at all.

use std::process::Command;

use bl_e2e::{bl_binary, cage_works};
use serde_json::Value;

fn bl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bl_binary()).args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sandbox_run_exits_with_the_commands_code_or_125_when_refused() {
    if !cage_works() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let ws_arg = ws.path().to_str().unwrap();
    let (code, out, _) = bl(&[
        "sandbox",
        "run",
        "--isolation",
        "container_restricted",
        "--workspace",
        ws_arg,
        "--",
        "sh",
        "-c",
        "echo hi; exit 7",
    ]);
    assert_eq!((code, out.as_str()), (7, "hi\n"));
    let (code, _, err) = bl(&[
        "sandbox",
        "run",
        "--isolation",
        "customer_managed_worker",
        "--workspace",
        ws_arg,
        "--",
        "true",
    ]);
    assert_eq!(code, 125);
    assert!(err.contains("customer's own worker"), "{err}");
    let (code, _, err) = bl(&[
        "sandbox",
        "run",
        "--isolation",
        "bogus",
        "--workspace",
        ws_arg,
        "--",
        "true",
    ]);
    assert_eq!(code, 125);
    assert!(err.contains("the tiers are"), "{err}");
}

#[test]
fn outputs_written_inside_the_sandbox_reach_the_artifact_store() {
    if !cage_works() {
        return;
    }
    // This is where bounded-loops' Linux sandbox failed: a node's declared
    // output written inside the cage must be there, intact, to publish.
    let run = tempfile::tempdir().unwrap();
    let ws = run.path().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    let (code, _, err) = bl(&[
        "sandbox",
        "run",
        "--isolation",
        "container_restricted",
        "--workspace",
        ws.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "mkdir -p out && printf 'the report' > out/report.md",
    ]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(ws.join("out/report.md")).unwrap();
    let store = bl_store::ArtifactStore::new(run.path().join("artifacts"), 1 << 20);
    let meta = bl_store::ArtifactMeta {
        organization_id: "org",
        project_id: "proj",
        media_type: "text/markdown",
        producer_attempt: "writer:1",
        sensitivity: "internal",
    };
    let digest = store.put(&bytes, &meta).unwrap();
    assert_eq!(store.get(&digest).unwrap(), b"the report");
    assert_eq!(
        bl_store::verify_artifacts(&run.path().join("artifacts")).unwrap(),
        1
    );
}

#[test]
fn the_probe_passes_caged_and_fails_uncaged_and_records_its_artifact() {
    if !cage_works() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let (code, stdout, err) = bl(&[
        "sandbox",
        "probe",
        "--out",
        out.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["passed"], true);
    let names: Vec<&str> = result["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "probe ran",
            "network denied",
            "write outside denied",
            "not host root",
            "sysctl write denied",
            "keyctl denied"
        ]
    );
    let artifact = std::fs::read(out.path().join("workspace/probe-report.json")).unwrap();
    assert_eq!(
        result["artifact_digest"],
        format!("sha256:{}", bl_core::sha256_hex(&artifact))
    );
    assert!(out.path().join("probe-result.json").is_file());

    // Without a cage the network and the write get through, and the
    // independent check says so whatever the probe claims.
    let out = tempfile::tempdir().unwrap();
    let (code, stdout, _) = bl(&[
        "sandbox",
        "probe",
        "--isolation",
        "workspace_only",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("FAIL network denied") && stdout.contains("WAS REACHED"),
        "{stdout}"
    );
    assert!(stdout.contains("FAIL keyctl denied"), "{stdout}");
    if nix::unistd::geteuid().is_root() {
        assert!(stdout.contains("FAIL not host root"), "{stdout}");
        assert!(stdout.contains("FAIL sysctl write denied"), "{stdout}");
    }
}

/// The report that opened this hole: as root, a caged command rewrote the
/// host's `kernel.core_pattern`. Rewriting the value already there (so the
/// test changes nothing even if the cage failed) must be refused, and the
/// host's value stays as it was.
#[test]
fn a_caged_command_cannot_rewrite_a_host_sysctl() {
    if !cage_works() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let before = std::fs::read("/proc/sys/kernel/core_pattern").unwrap();
    for tier in ["container_restricted", "process_restricted"] {
        let (code, out, err) = bl(&[
            "sandbox",
            "run",
            "--isolation",
            tier,
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "python3",
            "-c",
            "p='/proc/sys/kernel/core_pattern'; v=open(p,'rb').read(); open(p,'wb').write(v); print('REWROTE')",
        ]);
        assert_ne!(code, 0, "{tier}: {out}");
        assert!(!out.contains("REWROTE"), "{tier}: {out}");
        assert!(
            err.contains("Read-only file system") || err.contains("Permission denied"),
            "{tier}: {err}"
        );
    }
    assert_eq!(
        std::fs::read("/proc/sys/kernel/core_pattern").unwrap(),
        before
    );
}

#[test]
fn doctor_reports_each_check_with_a_status() {
    let (code, stdout, _) = bl(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let caged = ["bubblewrap", "cage identity", "probe"];
    let tail = [
        "seccomp",
        "landlock",
        "wasm toolchain",
        "egress config",
        "cache",
    ];
    if cage_works() {
        assert_eq!(names, [&caged[..], &tail[..]].concat());
        let checks = report["checks"].as_array().unwrap();
        assert_eq!(checks[2]["status"], "ok", "{}", checks[2]);
        let identity = checks[1]["detail"].as_str().unwrap();
        if nix::unistd::geteuid().is_root() {
            assert!(
                identity.contains("caged commands run as host uid 65534 gid 65534, never root"),
                "{identity}"
            );
        }
        assert!(identity.contains("seccomp refuses"), "{identity}");
    } else {
        assert_eq!(names, [&caged[..1], &tail[..]].concat());
    }
    assert_eq!(code == 0, report["ok"] == true);
    for check in report["checks"].as_array().unwrap() {
        if check["status"] != "ok" {
            assert!(check["fix"].is_string(), "a problem without a fix: {check}");
        }
    }
}
