use super::*;
use crate::shm::PREFIX;

const CHILD: &str = "RCOLL_TEST_SEGMENT_CHILD";

fn shape() -> Shape {
    Shape {
        rings: 1,
        slots: 2,
        slot_bytes: 4096,
    }
}

/// Run by [`a_rank_killed_during_setup_leaves_no_segment`] in a child process of its
/// own: makes a segment as a rank's setup does, says where, and waits to be killed.
#[test]
#[ignore = "a child of a_rank_killed_during_setup_leaves_no_segment"]
fn child_makes_a_segment_and_waits() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (_file, path, _seg) = make_segment(None, shape()).expect("a segment");
    println!("SEGMENT {}", path.announced);
    std::thread::sleep(Duration::from_secs(60));
}

/// A rank killed (SIGKILL) between making its segment and its peers mapping it leaves
/// nothing behind: the segment is an anonymous memory file, named by no path (with a
/// file in /dev/shm, the kill left it there).
#[test]
fn a_rank_killed_during_setup_leaves_no_segment() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "shm::setup::tests::child_makes_a_segment_and_waits",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("child");
    let pid = child.id();
    let out = child.stdout.take().expect("stdout");
    let line = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("SEGMENT "))
        .expect("the child's segment");
    let announced = line.trim_start_matches("SEGMENT ").to_owned();
    let prefix = format!("/proc/{pid}/fd/");
    assert!(announced.starts_with(&prefix), "{announced}");
    // The segment is there while the child lives: a peer could open it now.
    let (file, _) = open_announced(None, &announced).expect("the live segment");
    assert_eq!(
        file.metadata().expect("metadata").len(),
        shape().bytes().unwrap() as u64
    );
    drop(file);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("{PREFIX}{pid}-")))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    assert!(open_announced(None, &announced).is_err(), "still reachable");
}

/// What a peer announces is opened only if it is an rcoll segment: a descriptor that
/// is anything else, or a path that is not `/proc/<pid>/fd/<fd>` in numbers, is refused.
#[test]
fn only_an_anonymous_segment_is_opened() {
    let me = std::process::id();
    let (file, path, _seg) = make_segment(None, shape()).expect("a segment");
    assert!(open_announced(None, &path.announced).is_ok());
    let other = std::fs::File::open("/proc/self/status").expect("a file");
    for bad in [
        format!("/proc/{me}/fd/{}", other.as_raw_fd()),
        format!("/proc/{me}/fd/../../../etc/passwd"),
        "/etc/passwd".to_owned(),
        format!("/proc/self/fd/{}", file.as_raw_fd()),
        format!("/proc/{me}/fd/{} ", file.as_raw_fd()),
    ] {
        assert!(open_announced(None, &bad).is_err(), "{bad} was opened");
    }
}
