//! Faults that need network namespaces (root, iproute2): a blackholed link and a resolver
//! that never answers. Part of the `processes` test binary (`../processes.rs`).

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use super::common::{cannot_run, finish, StartedDir};
use super::rank_command;

/// A network namespace joined to this one by a veth pair, removed on drop.
struct Namespace {
    name: String,
    outer: String,
}

impl Namespace {
    /// `ip` as root; `None` (the test says why) where that is not possible.
    fn create(tag: &str, outer_addr: &str, inner_addr: &str) -> Option<Namespace> {
        let root = std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false);
        if !root || Command::new("ip").arg("-V").output().is_err() {
            return None;
        }
        let id = std::process::id() % 10_000;
        let ns = Namespace {
            name: format!("rcoll-{tag}-{id}"),
            outer: format!("rc{tag}{id}a"),
        };
        let inner = format!("rc{tag}{id}b");
        let run = |args: &[&str]| {
            let ok = Command::new("ip").args(args).status().map(|s| s.success());
            assert!(ok.unwrap_or(false), "ip {}", args.join(" "));
        };
        run(&["netns", "add", &ns.name]);
        run(&[
            "link", "add", &ns.outer, "type", "veth", "peer", "name", &inner,
        ]);
        run(&["link", "set", &inner, "netns", &ns.name]);
        run(&["addr", "add", &format!("{outer_addr}/24"), "dev", &ns.outer]);
        run(&["link", "set", &ns.outer, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns.name, "ip"];
            all.extend_from_slice(args);
            run(&all);
        };
        inside(&["addr", "add", &format!("{inner_addr}/24"), "dev", &inner]);
        inside(&["link", "set", &inner, "up"]);
        inside(&["link", "set", "lo", "up"]);
        Some(ns)
    }

    fn set_outer(&self, state: &str) {
        let _ = Command::new("ip")
            .args(["link", "set", &self.outer, state])
            .status();
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.outer])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The rendezvous address is a host name, and the resolver's server never answers (a
/// namespace whose `resolv.conf` names an address nobody has): the rank fails within its
/// timeout, saying resolution took too long, instead of waiting out the resolver.
#[test]
fn a_resolver_that_never_answers_fails_the_rank_within_the_timeout() {
    let Some(ns) = Namespace::create("dns", "10.199.78.1", "10.199.78.2") else {
        cannot_run(
            "a_resolver_that_never_answers_fails_the_rank_within_the_timeout",
            "a network namespace needs root and iproute2",
        );
        return;
    };
    // `ip netns exec` mounts /etc/netns/<name>/resolv.conf over /etc/resolv.conf.
    let dir = format!("/etc/netns/{}", ns.name);
    std::fs::create_dir_all(&dir).expect("mkdir /etc/netns/...");
    std::fs::write(
        format!("{dir}/resolv.conf"),
        "nameserver 10.199.78.9\noptions timeout:5 attempts:3\n",
    )
    .expect("resolv.conf");
    let secret = rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("id"));
    let extra = [("RCOLL_TIMEOUT", "2".to_string())];
    let start = std::time::Instant::now();
    let child = rank_command(
        "rcoll",
        "hello",
        (1, 2),
        "rcoll-root.example.net:4000",
        &secret,
        &extra,
        Some(&ns.name),
    )
    .spawn()
    .expect("spawn rank");
    let results = finish(vec![child], Duration::from_secs(60));
    let took = start.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, out) = &results[0];
    assert!(
        !ok && out.contains("took longer than 2s"),
        "the rank should fail on the resolver's deadline:\n{out}"
    );
    assert!(took < Duration::from_secs(8), "took {took:?}");
    eprintln!("a dead resolver: the rank failed after {took:?}");
}

/// Rank 2 of 3 lives in its own network namespace; mid-run the link to it goes down, so
/// its packets vanish with no RST or FIN. The other ranks fail within the timeout, naming it.
#[test]
fn a_blackholed_link_fails_the_others_within_the_timeout_naming_the_rank() {
    let (outer_addr, inner_addr) = ("10.199.77.1", "10.199.77.2");
    let Some(ns) = Namespace::create("bh", outer_addr, inner_addr) else {
        cannot_run(
            "a_blackholed_link_fails_the_others_within_the_timeout_naming_the_rank",
            "a network namespace needs root and iproute2",
        );
        return;
    };
    let port = {
        let l = TcpListener::bind((outer_addr, 0)).expect("bind on the veth");
        l.local_addr().expect("addr").port()
    };
    let root = format!("{outer_addr}:{port}");
    let secret = rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("id"));
    let joined = StartedDir::new(3);
    let extra = [
        ("RCOLL_TEST_DEAD", "2".to_string()),
        ("RCOLL_TIMEOUT", "3".to_string()),
        ("RCOLL_TEST_STARTED_DIR", joined.path.clone()),
    ];
    let rank = |r: usize, inside: bool| {
        let netns = inside.then_some(ns.name.as_str());
        rank_command("rcoll", "killed", (r, 3), &root, &secret, &extra, netns)
            .spawn()
            .expect("spawn rank")
    };
    let mut children = vec![rank(0, false), rank(1, false)];
    let mut cut_off = rank(2, true);
    // Down once every rank finished a collective with the others and loops on more.
    joined.wait(Duration::from_secs(60));
    ns.set_outer("down");
    let start = std::time::Instant::now();
    let results = finish(std::mem::take(&mut children), Duration::from_secs(60));
    let took = start.elapsed();
    let _ = cut_off.kill();
    let _ = cut_off.wait();
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            *ok && out.contains("RANK-ERROR") && out.contains("rank 2"),
            "rank {r} did not report the cut-off rank 2:\n{out}"
        );
    }
    assert!(took < Duration::from_secs(15), "took {took:?}");
    eprintln!("a blackholed link: every other rank failed {took:?} after the link went down");
}
