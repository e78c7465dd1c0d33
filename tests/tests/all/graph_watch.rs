//! `bl graph watch`: a run's arena served live on 127.0.0.1. A run being
//! written by another process is watched in real headless Chromium
//! (through chromedriver) until it ends, verified, across a network cut
//! after which the browser reconnects by itself; the event stream is
//! read over raw HTTP to show that a reconnect with `Last-Event-ID` loses
//! and repeats nothing, that a wrong token finds nothing and that a ninth
//! stream is turned away.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bl_e2e::{bl_binary, repo_root};

/// `bl graph watch` on a free port, ended with the test.
struct Watching {
    child: Child,
    url: String,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn watch(dir: &Path, extra: &[&str]) -> Watching {
    let (child, url) = bl_e2e::serving(
        Command::new(bl_binary())
            .args(["graph", "watch", "--run", "run"])
            .args(extra)
            .current_dir(dir),
        "watch",
    );
    Watching { child, url }
}

/// A graph of `n` nodes whose stand-in agent answers at once, or, with
/// `held`, only once that file exists (or, for the k-th agent to start,
/// `<held>.k`): the test decides when the run may go on, whatever the
/// machine's load.
fn graph(case: &Path, n: usize, held: Option<&Path>) -> PathBuf {
    let dir = case.join("graph");
    let made = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .arg(n.to_string())
        .arg("workspace_only")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(made.success());
    if let Some(held) = held {
        let claude = dir.join("fake-bin/claude");
        let script = std::fs::read_to_string(&claude).unwrap();
        let held = held.display();
        let wait = format!(
            "cat >/dev/null\nk=1\nwhile ! mkdir '{held}.ticket'$k 2>/dev/null; do k=$((k+1)); done\n\
             while [ ! -e '{held}' ] && [ ! -e '{held}.'$k ]; do sleep 0.05; done\n"
        );
        std::fs::write(&claude, script.replacen("cat >/dev/null\n", &wait, 1)).unwrap();
    }
    dir
}

fn start_run(dir: &Path, key: Option<&Path>) -> Child {
    let path = bl_e2e::path_with_fakes(dir);
    let mut command = Command::new(bl_binary());
    command
        .args(bl_e2e::GRAPH_RUN)
        .current_dir(dir)
        .env("PATH", path)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(key) = key {
        command.arg("--checkpoint-key").arg(key);
    }
    command.spawn().unwrap()
}

/// The `id:` of every event of an SSE answer, read over HTTP/1.0 (no
/// chunking) until `last` or the stream ends.
fn stream_ids(url: &str, last_event_id: Option<u64>, after: u64, last: u64) -> Vec<u64> {
    let (host, path) = split(url);
    let mut stream = TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let resume = last_event_id.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
    write!(
        stream,
        "GET {path}events?after={after} HTTP/1.0\r\nHost: {host}\r\n{resume}\r\n"
    )
    .unwrap();
    let mut ids = Vec::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        if let Some(id) = line.strip_prefix("id: ") {
            let id: u64 = id.parse().unwrap();
            ids.push(id);
            if id == last {
                break;
            }
        }
    }
    ids
}

/// A loopback TCP relay between the browser and `bl graph watch`, which
/// records what the browser asks and can cut every connection at once:
/// a real network failure, after which the browser reconnects by itself.
struct Relay {
    address: String,
    open: Arc<Mutex<Vec<TcpStream>>>,
    asked: Arc<Mutex<String>>,
}

impl Relay {
    fn to(upstream: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let asked: Arc<Mutex<String>> = Arc::default();
        let (upstream, held, heard) = (upstream.to_string(), open.clone(), asked.clone());
        std::thread::spawn(move || {
            for browser in listener.incoming() {
                let Ok(mut browser) = browser else { return };
                let Ok(mut server) = TcpStream::connect(&upstream) else {
                    return;
                };
                held.lock()
                    .unwrap()
                    .extend([browser.try_clone().unwrap(), server.try_clone().unwrap()]);
                let (mut to_server, mut to_browser) =
                    (server.try_clone().unwrap(), browser.try_clone().unwrap());
                let heard = heard.clone();
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = browser.read(&mut buffer) {
                        heard
                            .lock()
                            .unwrap()
                            .push_str(&String::from_utf8_lossy(&buffer[..n]));
                        if to_server.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to_server.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut server, &mut to_browser);
                    let _ = to_browser.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Relay {
            address,
            open,
            asked,
        }
    }

    /// Every connection so far, closed at both ends.
    fn cut(&self) {
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The `Last-Event-ID`s the browser sent, in order.
    fn last_event_ids(&self) -> Vec<u64> {
        let asked = self.asked.lock().unwrap();
        asked
            .lines()
            .filter_map(|l| {
                l.strip_prefix("Last-Event-ID: ")
                    .or(l.strip_prefix("last-event-id: "))
            })
            .filter_map(|id| id.trim().parse().ok())
            .collect()
    }
}

/// `http://host:port/token/` → ("host:port", "/token/").
fn split(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap();
    let slash = rest.find('/').unwrap();
    (&rest[..slash], &rest[slash..])
}

/// The status line of a plain GET of `path`.
fn status_of(host: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(host).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut first = String::new();
    BufReader::new(stream).read_line(&mut first).unwrap();
    first.trim().to_string()
}

#[test]
fn a_reconnect_with_last_event_id_loses_and_repeats_nothing_and_streams_are_bounded() {
    let case = tempfile::tempdir().unwrap();
    let dir = graph(case.path(), 4, None);
    assert!(start_run(&dir, None).wait().unwrap().success());
    let total = bl_e2e::log_text(&dir.join("run/controller-events.jsonl"))
        .lines()
        .count() as u64;
    let watching = watch(&dir, &[]);
    // Cut after event 10, come back with the id the browser would send.
    let first = stream_ids(&watching.url, None, 0, 10);
    assert_eq!(first, (1..=10).collect::<Vec<_>>());
    let second = stream_ids(&watching.url, Some(10), 0, total);
    assert_eq!(second, (11..=total).collect::<Vec<_>>());
    // The page's own starting point, when the browser has no id yet.
    assert_eq!(
        stream_ids(&watching.url, None, total - 2, total),
        vec![total - 1, total]
    );

    let (host, path) = split(&watching.url);
    assert!(status_of(host, "/0123456789abcdef0123456789abcdef/").contains("404"));
    assert!(status_of(host, &format!("{path}../../etc/passwd")).contains("404"));
    assert!(status_of(host, path).contains("200"));
    // Eight streams held open; the ninth is turned away.
    let mut held = Vec::new();
    for _ in 0..bl_web::MAX_STREAMS {
        let mut stream = TcpStream::connect(host).unwrap();
        write!(
            stream,
            "GET {path}events?after={total} HTTP/1.0\r\nHost: {host}\r\n\r\n"
        )
        .unwrap();
        let mut first = [0u8; 12];
        stream.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.0 200");
        held.push(stream);
    }
    assert!(
        status_of(host, &format!("{path}events?after={total}")).contains("503"),
        "a ninth stream"
    );
    drop(held);

    // A log that shrinks under a stream ends it with a failure, which the
    // page shows as LOCAL/UNVERIFIED; nothing after it is sent. (The server
    // frees a dropped stream's place when it next writes to it: until then
    // a new stream may still be turned away, so ask until one is taken.)
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let stream = loop {
        let mut stream = TcpStream::connect(host).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(
            stream,
            "GET {path}events?after={total} HTTP/1.0\r\nHost: {host}\r\n\r\n"
        )
        .unwrap();
        let mut first = [0u8; 12];
        stream.read_exact(&mut first).unwrap();
        if &first == b"HTTP/1.0 200" {
            break stream;
        }
        assert!(
            std::time::Instant::now() < until,
            "no stream was taken again"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut lines = BufReader::new(stream).lines();
    // The stream is going once its checkpoint has come.
    for line in lines.by_ref() {
        if line.unwrap() == "event: checkpoint" {
            break;
        }
    }
    let log = dir.join("run/controller-events.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, &text[..text.len() / 2]).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let failure = rest
        .iter()
        .position(|l| l == "event: failure")
        .unwrap_or_else(|| panic!("no failure event: {rest:?}"));
    assert!(rest[failure + 1].contains("shrank"), "{rest:?}");
    assert!(!rest.iter().any(|l| l.starts_with("id: ")), "{rest:?}");
}

/// A server holds at most `MAX_CONNECTIONS` at once: one more waits to be
/// accepted (no answer comes), and is served as soon as one ends.
#[test]
fn connections_beyond_the_cap_wait_until_one_ends() {
    let case = tempfile::tempdir().unwrap();
    let dir = graph(case.path(), 1, None);
    let mut run = start_run(&dir, None);
    assert!(run.wait().unwrap().success());
    let watching = watch(&dir, &[]);
    let (host, path) = split(&watching.url);
    let idle: Vec<TcpStream> = (0..bl_web::MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(host).unwrap())
        .collect();
    let ask = || {
        let mut stream = TcpStream::connect(host).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
        let mut first = String::new();
        let _ = BufReader::new(stream).read_line(&mut first);
        first
    };
    assert_eq!(ask(), "", "answered past the cap");
    drop(idle);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = ask();
        if answer.contains("200") {
            break;
        }
        assert!(
            Instant::now() < until,
            "not served once the others ended: {answer:?}"
        );
    }
}

#[test]
fn a_run_written_by_another_process_is_watched_live_to_its_verified_end() {
    if !crate::browser::available(true) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let key = case.path().join("watch.key");
    let made = Command::new(bl_binary())
        .args(["keys", "generate", "--name", "watch-test", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let go = case.path().join("go");
    let dir = graph(case.path(), 3, Some(&go));
    let mut run = start_run(&dir, Some(&key));
    let until = Instant::now() + Duration::from_secs(30);
    while !dir.join("run/run-meta.json").is_file() {
        assert!(Instant::now() < until, "the run did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let watching = watch(
        &dir,
        &["--pubkey", case.path().join("watch.pub").to_str().unwrap()],
    );

    // The browser reaches the page through a relay that the test cuts.
    let (host, path) = split(&watching.url);
    let relay = Relay::to(host);
    let relayed = format!("http://{}{path}", relay.address);

    let seen = crate::browser::Driver::start().drive(async |client| {
        use fantoccini::Locator;
        client.goto(&relayed).await.unwrap();
        let text = async |id| crate::browser::text(client, id).await;
        // The first look: the run is still going.
        client
            .wait()
            .for_element(Locator::Css(r#"body[data-ready="true"]"#))
            .await
            .unwrap();
        let early = text("summary").await;
        let held = |name: &'static str| async move {
            let said = client
                .find(Locator::Css("body"))
                .await
                .unwrap()
                .attr(name)
                .await
                .unwrap();
            said.and_then(|n| n.parse::<usize>().ok()).unwrap_or(0)
        };
        let loaded = held("data-held").await;
        // One agent answers; its events reach the page over the stream.
        std::fs::write(format!("{}.1", go.display()), "").unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while held("data-events").await <= loaded {
            assert!(Instant::now() < deadline, "no event came over the stream");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before_cut = held("data-events").await;
        // The network fails; then the rest of the agents answer while the
        // browser is reconnecting.
        relay.cut();
        std::fs::write(&go, "").unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let (summary, trust) = loop {
            let (summary, trust) = (text("summary").await, text("trust").await);
            if summary.starts_with("run SUCCEEDED; 3 SUCCEEDED") && trust.starts_with("Verified")
                || Instant::now() > deadline
            {
                break (summary, trust);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        crate::browser::assert_not_blank(client, "watch").await;
        let (repeated, gaps) = (held("data-repeated").await, held("data-gaps").await);
        (early, summary, trust, before_cut, repeated, gaps)
    });
    assert!(run.wait().unwrap().success());
    let (early, summary, trust, before_cut, repeated, gaps) = seen;
    // The browser came back saying how far it had got, and was sent
    // nothing twice and nothing out of order.
    let ids = relay.last_event_ids();
    assert!(
        ids.iter().any(|id| *id as usize >= before_cut),
        "no reconnect said Last-Event-ID of at least {before_cut}: {ids:?}"
    );
    assert_eq!((repeated, gaps), (0, 0), "events sent twice, or skipped");
    assert!(
        !early.starts_with("run SUCCEEDED"),
        "watched from the start: {early}"
    );
    let total = bl_e2e::log_text(&dir.join("run/controller-events.jsonl"))
        .lines()
        .count();
    assert!(
        summary == format!("run SUCCEEDED; 3 SUCCEEDED; {total} events"),
        "every event once: {summary} (the log has {total})"
    );
    assert!(trust.starts_with("Verified"), "{trust}");
}
