//! Package digests of real directories, against the values bounded-loops
//! 0.7.6 `bl graph digest` printed for the same trees.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use bl_packages::{Catalogue, PackageError, digest};

fn write(root: &Path, rel: &str, bytes: &[u8], mode: u32) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, bytes).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
}

fn dir(root: &Path, rel: &str) {
    fs::create_dir_all(root.join(rel)).unwrap();
}

#[test]
fn one_file() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "loop.yaml", b"x", 0o644);
    assert_eq!(
        digest(t.path()).unwrap(),
        "sha256:abda728013af9bdb8c793ff246b71f553db458fff66767cd40a777794ed7515b"
    );
}

#[test]
fn nested_empty_executable_and_non_ascii() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    dir(p, "sub/deeper");
    dir(p, "empty");
    write(p, "loop.yaml", b"abc", 0o644);
    write(p, "sub/run.sh", b"hi\n", 0o755);
    write(p, "sub/deeper/z", b"", 0o644);
    write(p, "B/\u{e9}.txt", b"q", 0o644);
    write(p, "a.txt", b"Q", 0o644);
    assert_eq!(
        digest(p).unwrap(),
        "sha256:87e992fc667b6ecfe721428c8fb545f7556cf5e2b25ab7c9df1968655b800894"
    );
}

#[test]
fn walk_order_hidden_files_any_execute_bit_and_ignored_names() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    write(p, "loop.yaml", b"abc", 0o644);
    write(p, "a-b", b"1", 0o644);
    write(p, "a/b", b"2", 0o644);
    write(p, "a.txt", b"3", 0o610); // group execute only
    write(p, "sub/.git/x", b"4", 0o644);
    dir(p, "sub/__pycache__");
    write(p, "sub/x.pyc", b"5", 0o644);
    write(p, "sub/.DS_Store", b"6", 0o644);
    write(p, ".env", b"7", 0o644);
    write(p, ".hidden/k", b"8", 0o644);
    write(p, "\u{20ac}\u{1f600}", b"9", 0o644);
    write(p, "Z", b"0", 0o601); // others execute only
    write(p, "sub/.bounded-loops/r", b"1", 0o644);
    dir(p, ".bounded-loops");
    assert_eq!(
        digest(p).unwrap(),
        "sha256:185a0a0a1d92e95145bd06440441ba74950e76e6a167016a77a29c8f6bd13d71"
    );
}

#[test]
fn ignored_names_apply_to_files_and_directories_suffixes_to_files_only() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    write(p, "loop.yaml", b"abc", 0o644);
    write(p, ".git", b"1", 0o644);
    write(p, "__pycache__", b"2", 0o644);
    write(p, "d.pyc/k", b"3", 0o644);
    write(p, ".DS_Store/k", b"4", 0o644);
    write(p, "x.PYC", b"5", 0o644);
    write(p, ".ruff_cache", b"6", 0o644);
    write(p, "y.pyo", b"7", 0o644);
    assert_eq!(
        digest(p).unwrap(),
        "sha256:958321d98bc8d5495c420b43a3c3c5215badad11bfae4ffcca6761fff96000fc"
    );
}

#[test]
fn the_package_directory_name_and_times_do_not_count() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "one/loop.yaml", b"x", 0o644);
    write(t.path(), "two/loop.yaml", b"x", 0o644);
    assert_eq!(
        digest(&t.path().join("one")).unwrap(),
        digest(&t.path().join("two")).unwrap()
    );
}

#[test]
fn symlinks_and_special_files_are_refused_except_inside_ignored_directories() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    write(p, "loop.yaml", b"x", 0o644);
    dir(p, ".git");
    symlink("/nowhere", p.join(".git/l")).unwrap();
    assert!(
        digest(p).is_ok(),
        "a symlink inside .git is skipped with it"
    );

    dir(p, "sub");
    symlink("/etc/passwd", p.join("sub/l.pyc")).unwrap();
    let err = digest(p).unwrap_err();
    assert!(
        matches!(&err, PackageError::Symlink { path, .. } if path == "sub/l.pyc"),
        "{err}"
    );
    assert!(
        err.to_string().contains("contains a symlink (sub/l.pyc)"),
        "{err}"
    );
    fs::remove_file(p.join("sub/l.pyc")).unwrap();

    mkfifo(&p.join("ff"));
    let err = digest(p).unwrap_err();
    assert!(matches!(err, PackageError::NotRegular { .. }), "{err}");
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_directory_without_loop_yaml_is_not_a_package() {
    let t = tempfile::tempdir().unwrap();
    let err = digest(t.path()).unwrap_err();
    assert!(err.to_string().starts_with("no loop.yaml in '"), "{err}");
    dir(t.path(), "loop.yaml");
    assert!(matches!(digest(t.path()), Err(PackageError::NoManifest(_))));
    let missing = t.path().join("missing");
    assert!(matches!(
        digest(&missing),
        Err(PackageError::NotADirectory(_))
    ));
}

#[test]
fn names_that_are_not_utf8_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "loop.yaml", b"x", 0o644);
    fs::write(
        t.path().join(std::ffi::OsStr::from_bytes(b"\xff\xfe")),
        b"z",
    )
    .unwrap();
    assert!(matches!(
        digest(t.path()),
        Err(PackageError::NotUtf8 { .. })
    ));
}

fn roots(paths: &[&Path]) -> Vec<PathBuf> {
    paths.iter().map(|p| p.to_path_buf()).collect()
}

#[test]
fn catalogue_takes_immediate_subdirectories_with_loop_yaml() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    write(&root, "loop.yaml", b"x", 0o644); // the root itself is not a package
    write(&root, "p1/loop.yaml", b"x", 0o644);
    write(&root, "p1/inner/loop.yaml", b"y", 0o644);
    write(&root, "a/b/loop.yaml", b"z", 0o644); // too deep
    dir(&root, "noloop");
    dir(&root, "dirnamed/loop.yaml");
    let catalogue = Catalogue::discover(&roots(&[&root, &t.path().join("absent")])).unwrap();
    let digests: Vec<_> = catalogue.digests().collect();
    assert_eq!(
        digests,
        ["sha256:13791bf7286d519802104fb153843557b6921c203f36ee39587c1b2884f42ebb"]
    );
    assert_eq!(
        catalogue.get(digests[0]).unwrap(),
        root.join("p1").canonicalize().unwrap()
    );
}

#[test]
fn catalogue_counts_a_package_once_however_it_is_reached() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    write(&root, "p1/loop.yaml", b"x", 0o644);
    let links = t.path().join("links");
    dir(&links, "");
    symlink(root.join("p1"), links.join("l1")).unwrap();
    symlink(root.join("p1"), links.join("l2")).unwrap();
    let catalogue = Catalogue::discover(&roots(&[&root, &links, &root])).unwrap();
    assert_eq!(catalogue.len(), 1);
}

#[test]
fn two_directories_with_one_digest_make_the_catalogue_unusable() {
    let t = tempfile::tempdir().unwrap();
    let first = t.path().join("first");
    let second = t.path().join("second");
    write(&first, "p/loop.yaml", b"x", 0o644);
    write(&second, "q/loop.yaml", b"x", 0o644);
    let err = Catalogue::discover(&roots(&[&first, &second])).unwrap_err();
    let (first, second) = (
        first.canonicalize().unwrap(),
        second.canonicalize().unwrap(),
    );
    assert_eq!(
        err.to_string(),
        format!(
            "two loop packages share digest abda728013af9bdb8c793ff246b71f553db458fff66767cd40a777794ed7515b: {} and {}",
            first.join("p").display(),
            second.join("q").display()
        )
    );
}

#[test]
fn a_large_file_is_streamed() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "loop.yaml", b"x", 0o644);
    let big = vec![7u8; 3 * 1024 * 1024 + 17];
    write(t.path(), "data.bin", &big, 0o644);
    let mut expected = bl_core::package::PackageDigest::new();
    expected.file("data.bin", false, big.len() as u64).unwrap();
    expected.content(&big).unwrap();
    expected.file("loop.yaml", false, 1).unwrap();
    expected.content(b"x").unwrap();
    assert_eq!(digest(t.path()).unwrap(), expected.finish().unwrap());
}
