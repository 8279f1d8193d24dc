//! The TCP backend: one connection per peer pair, driven by mio from the calling thread.
//!
//! There is no background thread: the engine's calls (`try_send`, `try_recv`, `wait`)
//! move the bytes. Every such call flushes what it can of each peer's outgoing queue and
//! reads every socket until it would block (mio's rule for edge-triggered readiness),
//! decoding frames ([`frame`]) into the arrival map, so a sender's progress never depends
//! on which message its receiver is waiting for. A socket read dry is read again once a
//! single `poll` over all such sockets says it has something (one system call, not one
//! per idle peer). [`Group::wait`] sleeps in
//! `mio::Poll::poll` until a socket is ready or the deadline passes; it does not sleep
//! when a frame was filed (or a queued message sent, or a peer found gone) since the last
//! wait, as another call's progress may have read what the engine waits for, leaving no
//! socket to wake it.
//!
//! Sends are vectored writes of the 32-byte header and the payload straight from the
//! payload buffer; a peer's queue holds at most `window` messages (the credit window).
//! Connections are set up by [`bootstrap`].

pub mod bootstrap;
pub(crate) mod control;
mod direct;
mod epoch;
pub mod frame;
mod sockets;

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::error::TransportError;
use crate::transport::{check_arrival, Endpoint, Group, Lend, Link, Payload, SendState, Transport};
use crate::types::{Rank, Tag};
use frame::{Decoder, Frame, Header, Kind, HEADER_LEN};

/// Messages queued to one peer before `try_send` refuses (the credit window).
pub const DEFAULT_WINDOW: usize = 64;

/// Bytes read from a socket per `read` call.
const READ_CHUNK: usize = 256 * 1024;

/// Payload bytes still to come above which a read goes straight into the frame's buffer.
const DIRECT_MIN: usize = 4096;

/// Requested socket send and receive buffer size.
const SOCKET_BUFFER: usize = 4 << 20;

/// Spare payload buffers kept for reuse, at most this many ...
const POOL_BUFFERS: usize = 256;

/// ... holding at most this many bytes of capacity together. A miss costs a fresh
/// allocation (for segment-sized buffers, an mmap and page faults); a pool bounded by
/// count alone pins, in the end, every buffer grown to the largest message it ever carried.
const POOL_BYTES: usize = 4 << 20;

/// Bytes of received, not yet taken messages that all peers together may make this rank
/// hold, and the least each peer gets: past its share, this rank stops reading that peer's
/// socket (TCP then stops the sender) until the engine takes some. Past the whole
/// (however many peers share it), it reads only the peers the engine is waiting for:
/// what it asked for must come, behind whatever that peer sent before it.
const RECV_BUDGET: usize = 1 << 30;
const PEER_BUDGET_MIN: usize = 64 << 20;

/// A message queued to a peer: `written` counts the header's bytes, then the payload's.
/// A message the socket took part of holds only the rest as its payload, its header
/// counted as written.
struct Outgoing {
    header: [u8; HEADER_LEN],
    payload: Payload,
    written: usize,
}

struct Peer {
    stream: TcpStream,
    decoder: Decoder,
    queue: VecDeque<Outgoing>,
    /// Why the connection is gone (EOF, reset, protocol error), once it is.
    gone: Option<String>,
    /// Bytes of this peer's messages received and not yet taken.
    held: usize,
    /// The engine asked for a message of this peer that it has not taken yet: read even
    /// past [`RECV_BUDGET`].
    awaited: bool,
    /// Its last message was large enough to be read straight into its buffer.
    large: bool,
    /// Receives taken straight into their destinations ([`direct`]).
    direct: direct::Direct,
    /// Its socket was read until it would block: [`TcpTransport::progress`] reads it
    /// again only once a `poll` says it has something.
    quiet: bool,
    /// The connection's session key, under which control messages are sealed
    /// ([`control`]); `None` only for connections made without a handshake (tests).
    session: Option<bootstrap::auth::SessionKey>,
    /// Control messages sent to and taken from this peer, per exchange: part of each
    /// message's seal, so none can be replayed or moved.
    controls_sent: [u64; control::EXCHANGES],
    controls_taken: [u64; control::EXCHANGES],
}

/// One rank's endpoint of a TCP group. Built by [`bootstrap::connect`].
pub struct TcpTransport {
    me: Endpoint,
    poll: Poll,
    events: Events,
    peers: Vec<Option<Peer>>,
    arrived: crate::transport::Arrivals<(Tag, Payload)>,
    pool: Pool,
    read_buf: Vec<u8>,
    /// Frames decoded by one read, before they are filed (kept to reuse its memory).
    frames: Vec<Frame>,
    window: usize,
    /// Most bytes of untaken messages held per peer (see [`RECV_BUDGET`]).
    peer_budget: usize,
    /// Most bytes of untaken messages held from all peers together, but those awaited
    /// ([`RECV_BUDGET`]), and the bytes held now.
    recv_budget: usize,
    held_total: usize,
    aborted: Option<(Rank, String)>,
    abort_sent: bool,
    /// The group's epoch: one more after every shrink ([`epoch`]); aborts of earlier
    /// epochs are ignored.
    epoch: u32,
    /// Survivors are agreeing on the new epoch ([`Group::begin_epoch`]): an abort of
    /// it is held in `held_abort` until [`Group::commit_epoch`].
    agreeing: bool,
    held_abort: Option<(Rank, String)>,
    /// Peers that asked whether this rank runs, to answer (each once).
    pinged_by: Vec<usize>,
    /// Read past the budgets: a failure is being diagnosed, and what matters now is a
    /// peer's last frames (an abort, a pong, its close) behind the data held back.
    draining: bool,
    /// Peers that answered this rank's pings.
    ponged: Vec<bool>,
    broken: Option<TransportError>,
    /// Messages read straight into their destinations ([`direct`]).
    placed: u64,
    /// Frames filed, messages read into place and queued messages sent in full: what a
    /// caller may be waiting for. A wait that finds it, or the peers gone, changed since
    /// the last wait returned does not sleep ([`TcpTransport::mark`]).
    progressed: u64,
    seen: (u64, usize),
    /// Socket reads tried by [`TcpTransport::progress`] (what a quiet peer saves).
    #[cfg(test)]
    reads: u64,
    /// Bytes of caller memory that `send_slice` copied into its queue.
    #[cfg(test)]
    copied: u64,
}

/// A buffer for a `len`-byte payload from `pool`, or a new one.
/// Spare payload buffers, bounded by [`POOL_BUFFERS`] and [`POOL_BYTES`].
#[derive(Default)]
pub(crate) struct Pool {
    buffers: Vec<Vec<u8>>,
    /// The buffers' capacity, together.
    bytes: usize,
}

impl Pool {
    /// A spare buffer (its length kept), or a new empty one.
    fn pop(&mut self) -> Vec<u8> {
        match self.buffers.pop() {
            Some(v) => {
                self.bytes -= v.capacity();
                v
            }
            None => Vec::new(),
        }
    }

    /// A buffer with room for `len` bytes. A pooled buffer keeps its length (room the
    /// decoder need not clear) unless it must grow: then its stale bytes are not worth
    /// copying.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.pop();
        if v.capacity() < len {
            v.clear();
            v.reserve(len);
        }
        v
    }

    /// Keeps `payload`'s buffer for reuse if the pool has room.
    pub(crate) fn give(&mut self, payload: Payload) {
        let v = payload.into_storage();
        if self.buffers.len() < POOL_BUFFERS && self.bytes + v.capacity() <= POOL_BYTES {
            self.bytes += v.capacity();
            self.buffers.push(v);
        }
    }
}

impl TcpTransport {
    /// The session key of each peer's connection (from its handshake), `keys[r]` for rank
    /// `r`: control messages to and from it are sealed under it from now on.
    pub(crate) fn set_sessions(&mut self, keys: Vec<Option<bootstrap::auth::SessionKey>>) {
        for (peer, key) in self.peers.iter_mut().zip(keys) {
            if let Some(p) = peer {
                p.session = key;
            }
        }
    }

    /// Records where every rank runs.
    pub(crate) fn set_hosts(&mut self, hosts: std::sync::Arc<crate::hosts::HostMap>) {
        self.me.hosts = Some(hosts);
    }

    /// Wraps connected streams, `streams[r]` for every peer `r` (`None` for this rank).
    pub(crate) fn new(
        rank: Rank,
        streams: Vec<Option<std::net::TcpStream>>,
        window: usize,
    ) -> io::Result<TcpTransport> {
        let poll = Poll::new()?;
        let mut peers = Vec::with_capacity(streams.len());
        for (r, s) in streams.into_iter().enumerate() {
            peers.push(match s {
                None => None,
                Some(s) => {
                    s.set_nonblocking(true)?;
                    s.set_nodelay(true)?;
                    // Room for a window of segments in flight each way; the kernel may
                    // clamp it (net.core.wmem_max / rmem_max), which only costs throughput.
                    let sock = socket2::SockRef::from(&s);
                    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
                    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
                    let mut stream = TcpStream::from_std(s);
                    poll.registry().register(
                        &mut stream,
                        Token(r),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    Some(Peer {
                        stream,
                        decoder: Decoder::default(),
                        queue: VecDeque::new(),
                        gone: None,
                        held: 0,
                        awaited: false,
                        large: false,
                        direct: Default::default(),
                        quiet: false,
                        session: None,
                        controls_sent: [0; control::EXCHANGES],
                        controls_taken: [0; control::EXCHANGES],
                    })
                }
            });
        }
        let peer_budget = (RECV_BUDGET / peers.len().saturating_sub(1).max(1)).max(PEER_BUDGET_MIN);
        Ok(TcpTransport {
            peer_budget,
            recv_budget: RECV_BUDGET,
            held_total: 0,
            me: Endpoint::new("tcp", rank, peers.len()),
            poll,
            events: Events::with_capacity(peers.len().max(16)),
            peers,
            arrived: Default::default(),
            pool: Pool::default(),
            read_buf: vec![0; READ_CHUNK],
            frames: Vec::new(),
            window: window.max(1),
            aborted: None,
            abort_sent: false,
            epoch: 0,
            agreeing: false,
            held_abort: None,
            pinged_by: Vec::new(),
            draining: false,
            ponged: Vec::new(),
            broken: None,
            placed: 0,
            progressed: 0,
            seen: (0, 0),
            #[cfg(test)]
            reads: 0,
            #[cfg(test)]
            copied: 0,
        })
    }

    /// What changed that a caller may wait for: `progressed`, and the peers found
    /// gone (closed, reset, or cut off by a protocol error). Another call's progress may
    /// have read it, and then no socket is ready again: edge-triggered, a socket read dry
    /// wakes no wait, nor does one whose connection ended on an edge a wait took before.
    fn mark(&self) -> (u64, usize) {
        let gone = self.peers.iter().flatten().filter(|p| p.gone.is_some());
        (self.progressed, gone.count())
    }

    fn check_usable(&self) -> Result<(), TransportError> {
        if let Some((by, reason)) = &self.aborted {
            return Err(TransportError::Aborted {
                rank: self.me.rank,
                by: *by,
                reason: reason.clone(),
            });
        }
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The engine asks for a message of peer `r` (until it takes one).
    fn await_peer(&mut self, r: usize) {
        if let Some(Some(p)) = self.peers.get_mut(r) {
            p.awaited = true;
        }
    }

    fn peer_index(&self, peer: Rank) -> Result<usize, TransportError> {
        match self.peers.get(peer.index()) {
            Some(Some(_)) => Ok(peer.index()),
            _ => Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.me.nranks,
            }),
        }
    }

    fn take(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        if self.spilled(peer.index(), tag) {
            return Err(self.moved(peer, tag));
        }
        match self.remove_arrived(peer, tag) {
            None => Ok(None),
            Some((sent, payload)) => {
                check_arrival(self.me.rank, peer, tag, sent, payload, len).map(Some)
            }
        }
    }

    /// Takes an arrived message off the map and its bytes off its peer's budget.
    fn remove_arrived(&mut self, peer: Rank, tag: Tag) -> Option<(Tag, Payload)> {
        let found = self.arrived.remove(&(peer, tag.key()))?;
        self.release(peer, found.1.len());
        if let Some(Some(p)) = self.peers.get_mut(peer.index()) {
            p.awaited = false;
        }
        Some(found)
    }

    /// `bytes` of `peer`'s held messages were taken or dropped.
    fn release(&mut self, peer: Rank, bytes: usize) {
        if let Some(Some(p)) = self.peers.get_mut(peer.index()) {
            let bytes = bytes.min(p.held);
            p.held -= bytes;
            self.held_total -= bytes;
        }
    }

    /// The error for a peer whose connection is gone. A peer that failed usually told
    /// everyone why before it closed: read what has arrived first, so that its abort
    /// (naming the root cause) wins over "closed".
    fn closed(&mut self, peer: Rank) -> TransportError {
        self.draining = true;
        self.progress();
        self.draining = false;
        match self.check_usable() {
            Err(e) => e,
            Ok(()) => TransportError::PeerClosed {
                rank: self.me.rank,
                peer,
            },
        }
    }

    /// Whether `peer`'s connection is gone (its process died or it closed).
    pub(crate) fn gone(&self, peer: usize) -> bool {
        matches!(self.peers.get(peer), Some(Some(p)) if p.gone.is_some())
    }
    /// Takes the message `tag` from `peer` whatever its length (control messages).
    pub(crate) fn take_unchecked(&mut self, peer: Rank, tag: Tag) -> Option<Payload> {
        self.remove_arrived(peer, tag).map(|(_, p)| p)
    }

    /// The control plane of a backend layered on these connections (verbs): progress,
    /// then the group's state — aborted by someone, or broken.
    pub(crate) fn control(&mut self) -> Result<(), TransportError> {
        self.progress();
        self.check_usable()
    }

    /// The error for `peer` if its connection is gone (its process died or it closed).
    pub(crate) fn peer_gone(&mut self, peer: Rank) -> Option<TransportError> {
        if self.gone(peer.index()) {
            Some(self.closed(peer))
        } else {
            None
        }
    }

    /// Makes [`Group::wait`] also wake when `fd` becomes readable (a verbs completion
    /// channel). The fd must stay open while this transport lives.
    pub(crate) fn register_fd(&mut self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.poll.registry().register(
            &mut mio::unix::SourceFd(&fd),
            Token(usize::MAX - 1),
            Interest::READABLE,
        )
    }

    /// The local address of the connections (the address peers know this rank by).
    pub fn local_ip(&self) -> Option<std::net::IpAddr> {
        self.peers
            .iter()
            .flatten()
            .find_map(|p| p.stream.local_addr().ok())
            .map(|a| a.ip())
    }

    /// Writes header and `data` with one vectored write when nothing is queued to the peer:
    /// no copy if the socket takes it all; otherwise the rest of the message is queued
    /// (copied). Behind a queued message, it tries to write that out first and refuses
    /// (`false`, no room yet) while it stays: the caller's memory waits, and no copy is
    /// made of a message the socket cannot take anyway (at 64 MiB on 4 ranks, a third of
    /// the bytes sent were copied so).
    pub(crate) fn send_slice(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<bool, TransportError> {
        self.check_usable()?;
        let r = self.peer_index(peer)?;
        let queued = |t: &mut Self| match t.peers.get(r) {
            Some(Some(p)) if p.gone.is_none() => Ok(!p.queue.is_empty()),
            _ => Err(t.closed(peer)),
        };
        if queued(self)? {
            // Keep the stream in order: what is queued goes first.
            self.flush(r);
            if queued(self)? {
                return Ok(false);
            }
        }
        let header = Header {
            kind: Kind::Data,
            tag,
            len: data.len() as u64,
        }
        .encode();
        let total = HEADER_LEN + data.len();
        let mut written = 0;
        if let Some(Some(p)) = self.peers.get_mut(r) {
            while written < total {
                let (h, d) = if written < HEADER_LEN {
                    (&header[written..], data)
                } else {
                    (&[][..], &data[written - HEADER_LEN..])
                };
                match p.stream.write_vectored(&[IoSlice::new(h), IoSlice::new(d)]) {
                    Ok(0) => {
                        p.gone = Some("connection closed while writing".into());
                        break;
                    }
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        p.gone = Some(format!("write failed: {e}"));
                        break;
                    }
                }
            }
        }
        if self.gone(r) {
            return Err(self.closed(peer));
        }
        if written < total {
            // Only what the socket did not take: once the header is out, the queued
            // message holds the rest of the data alone, as if its header had been all.
            let (rest, written) = match written.checked_sub(HEADER_LEN) {
                Some(sent) => (&data[sent..], HEADER_LEN),
                None => (data, written),
            };
            let mut payload = self.alloc(rest.len());
            payload.as_bytes_mut().copy_from_slice(rest);
            #[cfg(test)]
            {
                self.copied += rest.len() as u64;
            }
            if let Some(Some(p)) = self.peers.get_mut(r) {
                p.queue.push_back(Outgoing {
                    header,
                    payload,
                    written,
                });
            }
        }
        Ok(true)
    }
}

impl Transport for TcpTransport {
    /// TCP never keeps reading the caller's memory after the call (`lend` is moot): see
    /// `TcpTransport::send_slice`.
    fn try_send_from(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
        _lend: Lend,
    ) -> Result<SendState, TransportError> {
        self.send_slice(peer, tag, data).map(SendState::sent)
    }

    fn endpoint(&self) -> &Endpoint {
        &self.me
    }

    fn alloc(&mut self, len: usize) -> Payload {
        Payload::reuse(self.pool.pop(), len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        self.check_usable()?;
        let r = self.peer_index(peer)?;
        if self.gone(r) {
            // A peer that failed usually told everyone why before it closed: read what has
            // arrived, so that its abort (naming the root cause) wins over "closed".
            return Err(self.closed(peer));
        }
        let window = self.window;
        let Some(Some(p)) = self.peers.get_mut(r) else {
            return Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.me.nranks,
            });
        };
        if p.queue.len() >= window {
            self.progress();
            let Some(Some(p)) = self.peers.get_mut(r) else {
                return Ok(Some(payload));
            };
            if p.queue.len() >= window {
                return Ok(Some(payload));
            }
        }
        let header = Header {
            kind: Kind::Data,
            tag,
            len: payload.len() as u64,
        }
        .encode();
        if let Some(Some(p)) = self.peers.get_mut(r) {
            p.queue.push_back(Outgoing {
                header,
                payload,
                written: 0,
            });
        }
        self.flush(r);
        Ok(None)
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        self.check_usable()?;
        let r = self.peer_index(peer)?;
        self.await_peer(r);
        if let Some(p) = self.take(peer, tag, len)? {
            return Ok(Some(p));
        }
        self.progress();
        self.check_usable()?;
        match self.take(peer, tag, len)? {
            Some(p) => Ok(Some(p)),
            // Why it is gone: a protocol error or an abort it sent wins over "closed".
            None if self.gone(r) => Err(self.closed(peer)),
            None => Ok(None),
        }
    }

    /// A large message is read from the socket straight into `dst` where its receive
    /// asked before its bytes came (`direct`); others are copied out of their buffers.
    /// The bytes of a message that begins to land in `dst` are there before the call
    /// returns `true`: the caller leaves `dst` alone until then, and asks with it again.
    fn try_recv_into(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        self.check_usable()?;
        let r = self.peer_index(peer)?;
        self.await_peer(r);
        if dst.len() >= DIRECT_MIN {
            self.want(r, tag, dst.len());
        }
        if self.take_into(r, peer, tag, dst)? {
            return Ok(true);
        }
        self.progress();
        self.check_usable()?;
        if self.take_into(r, peer, tag, dst)? {
            return Ok(true);
        }
        if self.gone(r) {
            return Err(self.closed(peer));
        }
        Ok(false)
    }

    fn link(&self, _peer: Rank) -> Link {
        // A message is read from the socket straight into the destination it is asked into.
        Link {
            reads_directly: true,
            ..Link::default()
        }
    }

    fn recycle(&mut self, payload: Payload) {
        self.pool.give(payload);
    }
}

impl Group for TcpTransport {
    fn control_check(&mut self, peer: Option<Rank>) -> Result<(), TransportError> {
        self.control()?;
        match peer.and_then(|p| self.peer_gone(p)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn known_gone(&mut self, peer: Rank) -> Option<TransportError> {
        self.peer_gone(peer)
    }

    fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.register_fd(fd)
    }

    fn statistics(&self) -> crate::Statistics {
        let spare = self.pool.buffers.len();
        crate::Statistics {
            placed_receives: self.placed,
            // The spare buffers, every one in the pool by construction.
            pool_buffers: spare,
            pool_bytes: self.pool.bytes,
            pool_accounted: spare,
            ..Default::default()
        }
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check_usable()?;
        let claimed = self.settle_claims();
        self.progress();
        let mut timeout = deadline.saturating_duration_since(Instant::now());
        if claimed {
            timeout = timeout.min(direct::CLAIMED_WAIT);
        }
        // Sockets are edge-triggered: what progress read since the last wait (here or in
        // a receive's own call) makes no socket ready again.
        if self.fresh_claims() || self.mark() != self.seen {
            timeout = Duration::ZERO;
        }
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let reason = format!("poll failed: {e}");
                self.broken.get_or_insert(TransportError::Aborted {
                    rank: self.me.rank,
                    by: self.me.rank,
                    reason,
                });
            }
        }
        self.progress();
        self.seen = self.mark();
        self.check_usable()
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        // Only what has arrived: channels are FIFO, so a stale message is here before
        // anything its sender sent later, and a later call that hears from it sees it.
        crate::transport::stale_in(&self.arrived, current)
    }

    fn unresponsive(&mut self, within: Duration) -> Vec<Rank> {
        self.ponged = vec![false; self.peers.len()];
        for r in 0..self.peers.len() {
            if matches!(self.peers.get(r), Some(Some(p)) if p.gone.is_none()) {
                self.queue_control(r, Kind::Ping);
            }
        }
        let until = Instant::now() + within;
        // A pong (or an abort, or a close) may sit behind data held back by the budget.
        self.draining = true;
        let silent = |t: &TcpTransport| -> Vec<Rank> {
            (0..t.peers.len())
                .filter(|&r| t.peers[r].is_some() && !t.ponged[r])
                .map(Rank::from)
                .collect()
        };
        loop {
            self.progress();
            let left = until.saturating_duration_since(Instant::now());
            if silent(self).is_empty() || left.is_zero() {
                break;
            }
            let _ = self
                .poll
                .poll(&mut self.events, Some(left.min(Duration::from_millis(10))));
        }
        self.draining = false;
        silent(self)
    }

    fn begin_epoch(&mut self) -> Result<u32, TransportError> {
        self.next_epoch()
    }

    fn commit_epoch(&mut self) {
        self.settle_epoch();
    }

    fn discard_from(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        self.discard(peer, old);
    }

    fn exclude(&mut self, peer: Rank) {
        self.forget(peer);
    }

    fn abort(&mut self, reason: &str) {
        // Sent once, even when another rank's abort is what brought us here: our reason
        // (which carries theirs) then precedes our close on every connection, so a peer
        // that only hears from us still learns the root cause.
        if self.abort_sent {
            return;
        }
        self.abort_sent = true;
        let header = Header {
            kind: Kind::Abort,
            tag: Tag {
                collective: self.epoch,
                ..Tag::default()
            },
            len: reason.len() as u64,
        }
        .encode();
        for r in 0..self.peers.len() {
            if let Some(Some(p)) = self.peers.get_mut(r) {
                let payload = Payload::reuse(reason.as_bytes().to_vec(), reason.len());
                // Queued data is moot once the group is aborted: drop it (all but a message
                // already half on the wire, which must be completed to keep the stream
                // framed), so that every peer gets the reason at once, before this process
                // can exit and close — a peer that saw the close first would blame us
                // instead of the root cause.
                let keep = usize::from(p.queue.front().is_some_and(|m| m.written > 0));
                p.queue.truncate(keep);
                p.queue.push_back(Outgoing {
                    header,
                    payload,
                    written: 0,
                });
            }
        }
        self.flush_briefly(Duration::from_millis(200));
        self.aborted
            .get_or_insert_with(|| (self.me.rank, reason.to_owned()));
    }
}

impl Drop for TcpTransport {
    /// Closes gracefully: flush what is queued, send FIN, and read until the peers close
    /// too (each step briefly bounded). Closing a socket with unread input would make the
    /// kernel answer with RST, which can destroy data — such as an abort frame — that the
    /// peer has not read yet.
    fn drop(&mut self) {
        let pause = Duration::from_millis(10);
        // Every frame read as it comes, claimed or not.
        self.draining = true;
        self.flush_briefly(Duration::from_millis(200));
        for p in self.peers.iter().flatten() {
            let _ = p.stream.shutdown(std::net::Shutdown::Write);
        }
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until && self.peers.iter().flatten().any(|p| p.gone.is_none()) {
            for r in 0..self.peers.len() {
                self.read(r);
            }
            self.arrived.clear();
            for p in self.peers.iter_mut().flatten() {
                p.held = 0;
            }
            self.held_total = 0;
            let _ = self.poll.poll(&mut self.events, Some(pause));
        }
        for p in self.peers.iter().flatten() {
            let _ = p.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests;
