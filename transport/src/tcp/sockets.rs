//! The sockets' side of the TCP backend: queues flushed with vectored writes, sockets read
//! until they would block and decoded into frames, and frames filed where they belong.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::time::{Duration, Instant};

use super::frame::{Frame, Header, Kind, HEADER_LEN};
use super::{Outgoing, Pool, TcpTransport, DIRECT_MIN, READ_CHUNK};
use crate::error::TransportError;
use crate::transport::Payload;
use crate::types::{Rank, Tag};

impl TcpTransport {
    /// Flushes every queue and reads every socket as far as they go without blocking (a
    /// socket read dry last time only once [`Self::wake_quiet`] finds something in it);
    /// answers pings.
    pub(super) fn progress(&mut self) {
        // Draining reads every socket: a failure is being diagnosed.
        let skip_quiet = !self.draining;
        if skip_quiet {
            self.wake_quiet();
        }
        for r in 0..self.peers.len() {
            self.flush(r);
            if skip_quiet && matches!(self.peers.get(r), Some(Some(p)) if p.quiet) {
                continue;
            }
            self.read(r);
        }
        while let Some(r) = self.pinged_by.pop() {
            self.queue_control(r, Kind::Pong);
            self.flush(r);
        }
    }

    /// Asks the kernel which quiet sockets (read dry last time) have something now: one
    /// `poll` for them all instead of a read each, which on a group of many ranks (and
    /// most patterns hear from one or two peers at a time) saves a system call per idle
    /// peer and poll. `poll` reports the sockets' state, not edges, so nothing that came
    /// before it is missed. With a single quiet socket, reading it costs the same as
    /// asking: it is just read.
    fn wake_quiet(&mut self) {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let asks = |p: &super::Peer| p.quiet && p.gone.is_none();
        if self.peers.iter().flatten().filter(|p| asks(p)).count() < 2 {
            for p in self.peers.iter_mut().flatten() {
                p.quiet = false;
            }
            return;
        }
        let quiet: Vec<usize> = (0..self.peers.len())
            .filter(|&r| matches!(self.peers.get(r), Some(Some(p)) if asks(p)))
            .collect();
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = quiet
                .iter()
                .filter_map(|&r| self.peers[r].as_ref())
                .map(|p| PollFd::new(p.stream.as_fd(), PollFlags::POLLIN))
                .collect();
            match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
                Ok(_) => fds
                    .iter()
                    .map(|f| f.revents().is_some_and(|e| !e.is_empty()))
                    .collect(),
                // Unsure: read them all.
                Err(_) => vec![true; fds.len()],
            }
        };
        for (&r, ready) in quiet.iter().zip(ready) {
            if let Some(Some(p)) = self.peers.get_mut(r) {
                p.quiet &= !ready;
            }
        }
    }

    /// Queues a control frame (no payload) to peer `r`, behind what is queued.
    pub(super) fn queue_control(&mut self, r: usize, kind: Kind) {
        let header = Header {
            kind,
            tag: Tag::default(),
            len: 0,
        }
        .encode();
        if let Some(Some(p)) = self.peers.get_mut(r) {
            p.queue.push_back(Outgoing {
                header,
                payload: Payload::reuse(Vec::new(), 0),
                written: 0,
            });
        }
    }

    /// Writes as much of peer `r`'s queue as the socket takes.
    pub(super) fn flush(&mut self, r: usize) {
        let Some(Some(peer)) = self.peers.get_mut(r) else {
            return;
        };
        while let Some(front) = peer.queue.front_mut() {
            if peer.gone.is_some() {
                break;
            }
            let total = HEADER_LEN + front.payload.len();
            let (h, p) = if front.written < HEADER_LEN {
                (&front.header[front.written..], front.payload.as_bytes())
            } else {
                (
                    &[][..],
                    &front.payload.as_bytes()[front.written - HEADER_LEN..],
                )
            };
            match peer
                .stream
                .write_vectored(&[IoSlice::new(h), IoSlice::new(p)])
            {
                Ok(0) => {
                    peer.gone = Some("connection closed while writing".into());
                }
                Ok(n) => {
                    front.written += n;
                    if front.written == total {
                        if let Some(done) = peer.queue.pop_front() {
                            self.progressed += 1;
                            // A shared-memory slot goes back to its sender (dropped).
                            self.pool.give(done.payload);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => peer.gone = Some(format!("write failed: {e}")),
            }
        }
    }

    /// Reads peer `r`'s socket until it would block, decoding frames; or until the peer's
    /// untaken messages reach its budget, or all peers' reach theirs and the engine is not
    /// waiting for this one (the rest waits in the socket).
    ///
    /// The rest of a large payload is read straight into its buffer, with at most the
    /// next header behind it (one pass over the bytes fewer than through `read_buf`). A
    /// frame claimed by a receive that reads it into its destination stops the reading
    /// here, until that receive has it or stops asking ([`super::direct`]).
    pub(super) fn read(&mut self, r: usize) {
        let from = Rank::from(r);
        let mut frames = std::mem::take(&mut self.frames);
        while let Some(Some(peer)) = self.peers.get_mut(r) {
            let over = peer.held >= self.peer_budget
                || (self.held_total >= self.recv_budget && !peer.awaited);
            if peer.gone.is_some() || (over && !self.draining) || peer.direct.blocks(self.draining)
            {
                break;
            }
            if let Some((header, got)) = peer.direct.spill() {
                let pool = &mut self.pool;
                peer.decoder.resume(header, got, &mut |len| pool.take(len));
            }
            #[cfg(test)]
            {
                self.reads += 1;
            }
            let (result, direct) = match peer.decoder.room(DIRECT_MIN) {
                Some(room) => {
                    let direct = room.len();
                    let head = &mut self.read_buf[..HEADER_LEN];
                    let mut bufs = [IoSliceMut::new(room), IoSliceMut::new(head)];
                    (peer.stream.read_vectored(&mut bufs), direct)
                }
                None => {
                    // After a large payload, most likely another: its header alone (and
                    // its payload left in the socket if a receive wants it).
                    let want = match peer.decoder.header_missing() {
                        h if h > 0 && (peer.large || !peer.direct.wants.is_empty()) => h,
                        _ => READ_CHUNK,
                    };
                    (peer.stream.read(&mut self.read_buf[..want]), 0)
                }
            };
            let n = match result {
                Ok(0) => {
                    peer.gone = Some("connection closed by peer".into());
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    peer.quiet = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    peer.gone = Some(format!("read failed: {e}"));
                    break;
                }
            };
            let direct = n.min(direct);
            if direct > 0 {
                frames.extend(peer.decoder.filled(direct));
            }
            let rest = &self.read_buf[..n - direct];
            let at = (self.me.rank, from);
            feed(
                peer,
                rest,
                &mut self.pool,
                self.draining,
                &mut frames,
                &mut self.broken,
                at,
            );
            for frame in frames.drain(..) {
                self.accept(r, frame);
            }
        }
        // Frames completed before a protocol error or a close still count.
        for frame in frames.drain(..) {
            self.accept(r, frame);
        }
        self.frames = frames;
    }

    /// Files a frame that arrived whole from peer `r`, or answers it.
    pub(super) fn accept(&mut self, r: usize, frame: Frame) {
        self.progressed += 1;
        match frame.header.kind {
            Kind::Data => {
                if let Some(Some(peer)) = self.peers.get_mut(r) {
                    peer.held += frame.payload.len();
                    self.held_total += frame.payload.len();
                    peer.large = frame.payload.len() >= DIRECT_MIN;
                }
            }
            Kind::Ping => {
                if !self.pinged_by.contains(&r) {
                    self.pinged_by.push(r);
                }
                return;
            }
            Kind::Pong => {
                if let Some(p) = self.ponged.get_mut(r) {
                    *p = true;
                }
                return;
            }
            Kind::Abort => {}
        }
        // An abort of an epoch that ended here (sent before its sender, too, carried on
        // after the failure) is history.
        if frame.header.kind == Kind::Abort && frame.header.tag.collective < self.epoch {
            return;
        }
        // One of the new epoch while the survivors still agree on it: for the new group,
        // once it exists (see `Group::commit_epoch`).
        if frame.header.kind == Kind::Abort && self.agreeing {
            let reason = String::from_utf8_lossy(&frame.payload).into_owned();
            self.held_abort.get_or_insert((Rank::from(r), reason));
            return;
        }
        deliver(
            self.me.rank,
            Rank::from(r),
            frame,
            &mut self.arrived,
            &mut self.aborted,
            &mut self.broken,
        );
    }

    /// Keeps flushing and reading for up to `limit` while a live peer has queued output:
    /// best effort before an abort or a close, never blocking for long.
    pub(super) fn flush_briefly(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        while Instant::now() < until
            && self
                .peers
                .iter()
                .flatten()
                .any(|p| p.gone.is_none() && !p.queue.is_empty())
        {
            self.progress();
            let _ = self
                .poll
                .poll(&mut self.events, Some(Duration::from_millis(10)));
        }
    }
}

/// Feeds `input`, bytes read from `peer`'s socket, to its decoder: the frames it
/// completes go to `frames`, a header a receive wants is claimed ([`super::direct`];
/// not while `draining`), and bytes that break the framing close the connection and fail
/// the group, naming the peer (`at`: this rank and the peer).
pub(super) fn feed(
    peer: &mut super::Peer,
    mut input: &[u8],
    pool: &mut Pool,
    draining: bool,
    frames: &mut Vec<Frame>,
    broken: &mut Option<TransportError>,
    (rank, from): (Rank, Rank),
) {
    while !input.is_empty() {
        let held = &peer.direct;
        let mut hold = |h: &Header| !draining && held.holds(h);
        match peer
            .decoder
            .feed_holding(input, &mut |len| pool.take(len), &mut hold)
        {
            Ok((used, frame)) => {
                input = &input[used..];
                frames.extend(frame);
            }
            Err(e) => {
                // The stream is no longer framed: nothing more from it can be trusted.
                // The group fails, naming the peer and what it sent.
                peer.gone = Some(format!("protocol error: {e}"));
                broken.get_or_insert(TransportError::Protocol {
                    rank,
                    peer: from,
                    reason: e.to_string(),
                });
                break;
            }
        }
    }
    if let Some(h) = peer.decoder.take_announced() {
        peer.direct.claim(h);
    }
}

/// Files a received frame: data into the arrival map, an abort into `aborted`.
fn deliver(
    me: Rank,
    from: Rank,
    frame: Frame,
    arrived: &mut crate::transport::Arrivals<(Tag, Payload)>,
    aborted: &mut Option<(Rank, String)>,
    broken: &mut Option<TransportError>,
) {
    let Frame { header, payload } = frame;
    match header.kind {
        Kind::Data => {
            let len = payload.len();
            let payload = Payload::reuse(payload, len);
            if arrived
                .insert((from, header.tag.key()), (header.tag, payload))
                .is_some()
            {
                broken.get_or_insert(TransportError::DuplicateTag {
                    rank: me,
                    peer: from,
                    tag: header.tag,
                });
            }
        }
        Kind::Abort => {
            let reason = String::from_utf8_lossy(&payload).into_owned();
            aborted.get_or_insert((from, reason));
        }
        // Answered by the reader, never filed.
        Kind::Ping | Kind::Pong => {}
    }
}
