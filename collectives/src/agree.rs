//! Agreement on the ranks that failed, among the survivors: a pure state machine, driven
//! by [`crate::shrink`] over the connections that still work (and by the tests here over
//! none).
//!
//! ```text
//!   rank 0 (dead)   rank 1 (coordinator)   rank 2            rank 3
//!                   <--- PROPOSE {0} ----- (suspects 0)
//!                   <------------------------------- PROPOSE {0}
//!                   -- DECIDE {0} -------> --------------->
//!                   <-- DECIDE {0} ------- (relays) ------>
//!                   <------------------------------- DECIDE {0} (relays)
//! ```
//!
//! Every rank knows some failed ranks (its *suspects*: peers whose connection closed, that
//! did not answer a liveness probe, or that the caller excludes). Its *coordinator* is the
//! lowest rank it does not suspect, so no rank is special (rank 0 may be the dead one).
//!
//! 1. A rank that is not its own coordinator sends it `PROPOSE(suspects)` and waits for a
//!    decision; if the coordinator fails meanwhile, it suspects it too and proposes to the
//!    next one.
//! 2. A coordinator waits for a proposal from every rank it does not suspect, folding each
//!    proposal's suspects into its own (and no longer waiting for those), then decides:
//!    the failed set is its suspects. It sends `DECIDE(set)` to every other rank.
//! 3. A rank that gets a decision from anyone adopts it if it has none, and sends it on to
//!    every other rank before it returns (so a coordinator that fails halfway through
//!    sending its decision leaves no survivor without it: whoever got it passes it on,
//!    and a rank that now waits on a new coordinator gets it from that one). A decision is
//!    never replaced: one that differs is an error (it cannot happen while suspicion means
//!    failure, which excluding the suspects makes true).
//! 4. A rank is done once it holds a decision and has heard `DECIDE` from every member of
//!    the new group (or found it dead since): each such message is the last thing its
//!    sender sent on the old communicator's epoch, so what arrived before it can be
//!    dropped then ([`rcoll_transport::Group::discard_from`]). A rank in the set
//!    learns that the others left it out.
//!
//! Every survivor decides the same set: a coordinator decides only after hearing from
//! every rank it does not suspect, and any rank it heard a decision from (or that heard
//! one) passes that decision on before anything else. A rank that fails after the decision
//! stays in the new group, whose first call then names it (shrink again). Proposals also
//! carry each rank's next call number, so that the new group numbers its calls after every
//! call of the old one and no message of the old one can be taken for a new one.

/// What one rank tells another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// To the sender's coordinator: the ranks it knows failed, and its next call number.
    Propose { suspects: Vec<bool>, seq: u32 },
    /// The decision, from the coordinator or passed on.
    Decide(Decision),
}

/// What the survivors agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    /// `excluded[r]`: rank `r` is left out (failed, or excluded by the caller).
    pub excluded: Vec<bool>,
    /// The new group's first call number: after every member's calls on the old group.
    pub base: u32,
}

/// Why a rank's agreement ended without a group to continue in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The survivors left this rank out.
    Excluded,
    /// Two decisions differ (from the first sender and this one).
    Conflict { first: usize, other: usize },
}

/// One rank's side of the agreement (see the [module](self)).
pub(crate) struct Agreement {
    me: usize,
    suspects: Vec<bool>,
    seq: u32,
    /// Proposals received, by sender.
    proposals: Vec<Option<(Vec<bool>, u32)>>,
    /// The coordinator this rank last proposed to.
    proposed_to: Option<usize>,
    decided: Option<(Decision, usize)>,
    /// `DECIDE` received from each rank.
    decided_by: Vec<bool>,
    refused: Option<Refusal>,
    out: Vec<(usize, Message)>,
}

impl Agreement {
    /// Rank `me` of `n`, knowing `suspects` failed, its next call number `seq`.
    pub fn new(n: usize, me: usize, suspects: &[usize], seq: u32) -> Agreement {
        let mut s = vec![false; n];
        for &r in suspects.iter().filter(|&&r| r < n && r != me) {
            s[r] = true;
        }
        Agreement {
            me,
            suspects: s,
            seq,
            proposals: vec![None; n],
            proposed_to: None,
            decided: None,
            decided_by: vec![false; n],
            refused: None,
            out: Vec::new(),
        }
    }

    fn n(&self) -> usize {
        self.suspects.len()
    }

    /// `r` failed (its connection closed, a probe went unanswered, a send to it failed).
    pub fn suspect(&mut self, r: usize) {
        if r < self.n() && r != self.me {
            self.suspects[r] = true;
        }
    }

    /// Handles `msg` from `from`.
    pub fn handle(&mut self, from: usize, msg: Message) {
        if from >= self.n() || from == self.me {
            return;
        }
        match msg {
            Message::Propose { suspects, seq } if suspects.len() == self.n() => {
                self.proposals[from] = Some((suspects, seq));
            }
            Message::Propose { .. } => {}
            Message::Decide(d) => {
                self.decided_by[from] = true;
                match &self.decided {
                    None => self.decide(d, from),
                    Some((mine, first)) => {
                        if *mine != d && self.refused.is_none() {
                            self.refused = Some(Refusal::Conflict {
                                first: *first,
                                other: from,
                            });
                        }
                    }
                }
            }
        }
    }

    fn decide(&mut self, d: Decision, from: usize) {
        // To every rank, the one it came from too: that copy is what tells it this rank
        // is done with the old group (step 4).
        for r in (0..self.n()).filter(|&r| r != self.me) {
            self.out.push((r, Message::Decide(d.clone())));
        }
        if d.excluded.get(self.me).copied().unwrap_or(true) && self.refused.is_none() {
            self.refused = Some(Refusal::Excluded);
        }
        self.decided = Some((d, from));
    }

    /// Moves on with what is known: proposes, or decides as coordinator.
    pub fn step(&mut self) {
        if self.decided.is_some() {
            return;
        }
        // What every proposal says failed, failed (the proposer saw it).
        for (suspects, _) in self.proposals.iter().flatten() {
            for (mine, theirs) in self.suspects.iter_mut().zip(suspects) {
                *mine |= *theirs;
            }
        }
        self.suspects[self.me] = false;
        let Some(coordinator) = (0..self.n()).find(|&r| !self.suspects[r]) else {
            return;
        };
        if coordinator != self.me {
            if self.proposed_to != Some(coordinator) {
                self.proposed_to = Some(coordinator);
                let msg = Message::Propose {
                    suspects: self.suspects.clone(),
                    seq: self.seq,
                };
                self.out.push((coordinator, msg));
            }
            return;
        }
        if self.waiting_on().is_empty() {
            // After every member's calls: the largest next call number among them.
            let base = (0..self.n())
                .filter(|&r| !self.suspects[r] && r != self.me)
                .filter_map(|r| self.proposals[r].as_ref().map(|p| p.1))
                .fold(self.seq, u32::max);
            let d = Decision {
                excluded: self.suspects.clone(),
                base,
            };
            self.decide(d, self.me);
        }
    }

    /// The ranks this rank waits to hear from: before a decision, its coordinator (or, as
    /// coordinator, those without a proposal); after it, the members whose `DECIDE` has not
    /// come and that are not known dead since.
    pub fn waiting_on(&self) -> Vec<usize> {
        let others = (0..self.n()).filter(|&r| r != self.me);
        match &self.decided {
            Some((d, _)) => others
                .filter(|&r| !d.excluded[r] && !self.decided_by[r] && !self.suspects[r])
                .collect(),
            None => match (0..self.n()).find(|&r| !self.suspects[r]) {
                Some(c) if c == self.me => others
                    .filter(|&r| !self.suspects[r] && self.proposals[r].is_none())
                    .collect(),
                Some(c) => vec![c],
                None => Vec::new(),
            },
        }
    }

    /// Messages to send, each to its rank.
    pub fn outgoing(&mut self) -> Vec<(usize, Message)> {
        std::mem::take(&mut self.out)
    }

    /// The outcome, once this rank is done (see the module's step 4).
    pub fn outcome(&self) -> Option<Result<&Decision, Refusal>> {
        if let Some(r) = &self.refused {
            return Some(Err(r.clone()));
        }
        let (d, _) = self.decided.as_ref()?;
        self.waiting_on().is_empty().then_some(Ok(d))
    }

    /// The rank whose decision this rank adopted (itself, as coordinator).
    pub fn decider(&self) -> Option<usize> {
        self.decided.as_ref().map(|(_, from)| *from)
    }

    /// The ranks this rank suspects now, and those the decision leaves out.
    pub fn suspects(&self) -> Vec<usize> {
        let out = |r: usize| self.decided.as_ref().is_some_and(|(d, _)| d.excluded[r]);
        (0..self.n())
            .filter(|&r| r != self.me && (self.suspects[r] || out(r)))
            .collect()
    }
}

impl Message {
    /// `[kind, seq or base (4 bytes LE), one bit per rank]`, always `wire_len(n)` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, word, set) = match self {
            Message::Propose { suspects, seq } => (0u8, *seq, suspects),
            Message::Decide(d) => (1u8, d.base, &d.excluded),
        };
        let mut v = vec![0u8; wire_len(set.len())];
        v[0] = kind;
        v[1..5].copy_from_slice(&word.to_le_bytes());
        for (r, _) in set.iter().enumerate().filter(|(_, &b)| b) {
            v[5 + r / 8] |= 1 << (r % 8);
        }
        v
    }

    /// The message of `n` ranks in `bytes`, or `None` if it is not one.
    pub fn decode(bytes: &[u8], n: usize) -> Option<Message> {
        if bytes.len() != wire_len(n) {
            return None;
        }
        let word = u32::from_le_bytes(bytes[1..5].try_into().ok()?);
        let set: Vec<bool> = (0..n)
            .map(|r| bytes[5 + r / 8] >> (r % 8) & 1 == 1)
            .collect();
        match bytes[0] {
            0 => Some(Message::Propose {
                suspects: set,
                seq: word,
            }),
            1 => Some(Message::Decide(Decision {
                excluded: set,
                base: word,
            })),
            _ => None,
        }
    }
}

/// Bytes of a message among `n` ranks.
pub(crate) fn wire_len(n: usize) -> usize {
    5 + n.div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Ranks exchanging messages in memory: FIFO per pair, delivered in an order the
    /// caller picks, with ranks that die (before or after sending some of their messages).
    struct Net {
        ranks: Vec<Agreement>,
        dead: Vec<bool>,
        /// `queues[from][to]`.
        queues: Vec<Vec<VecDeque<Message>>>,
    }

    impl Net {
        fn new(n: usize, suspects: &[&[usize]], seqs: &[u32]) -> Net {
            Net {
                ranks: (0..n)
                    .map(|r| Agreement::new(n, r, suspects[r], seqs[r]))
                    .collect(),
                dead: vec![false; n],
                queues: vec![vec![VecDeque::new(); n]; n],
            }
        }

        fn kill(&mut self, r: usize) {
            self.dead[r] = true;
            for q in &mut self.queues[r] {
                q.clear();
            }
        }

        /// Steps every live rank and queues what it sends, `limit` messages at most for
        /// `r` (it dies after that many, if given).
        fn step(&mut self, cut: Option<(usize, usize)>) {
            let n = self.ranks.len();
            for r in 0..n {
                if self.dead[r] {
                    continue;
                }
                self.ranks[r].step();
                let out = self.ranks[r].outgoing();
                for (i, (to, m)) in out.into_iter().enumerate() {
                    if let Some((who, limit)) = cut {
                        if who == r && i >= limit {
                            // What it sent before it died is on its way.
                            self.dead[r] = true;
                            break;
                        }
                    }
                    self.queues[r][to].push_back(m);
                }
            }
        }

        /// Delivers one message on each non-empty channel, in the order `order` gives for
        /// the senders; a live rank waiting on a dead one notices (its connection closed).
        fn deliver(&mut self, order: &[usize]) -> bool {
            let n = self.ranks.len();
            let mut any = false;
            for &from in order {
                for to in 0..n {
                    if self.dead[to] {
                        continue;
                    }
                    if let Some(m) = self.queues[from][to].pop_front() {
                        self.ranks[to].handle(from, m);
                        any = true;
                    }
                }
            }
            for r in (0..n).filter(|&r| !self.dead[r]) {
                for w in self.ranks[r].waiting_on() {
                    if self.dead[w] && self.queues[w][r].is_empty() {
                        self.ranks[r].suspect(w);
                        any = true;
                    }
                }
            }
            any
        }

        /// Runs to the end; every live rank's outcome.
        fn run(
            &mut self,
            order: &[usize],
            mut cut: Option<(usize, usize)>,
        ) -> Vec<Option<Result<Decision, Refusal>>> {
            for _ in 0..1000 {
                self.step(cut.take());
                let moved = self.deliver(order);
                let done = (0..self.ranks.len())
                    .all(|r| self.dead[r] || self.ranks[r].outcome().is_some());
                if done && !moved {
                    break;
                }
            }
            (0..self.ranks.len())
                .map(|r| {
                    (!self.dead[r]).then(|| {
                        self.ranks[r]
                            .outcome()
                            .expect("a live rank finished")
                            .cloned()
                    })
                })
                .collect()
        }
    }

    fn set(n: usize, failed: &[usize]) -> Vec<bool> {
        (0..n).map(|r| failed.contains(&r)).collect()
    }

    /// Every live rank decided `failed` (and the base).
    fn all_decided(out: &[Option<Result<Decision, Refusal>>], failed: &[usize], base: u32) {
        let n = out.len();
        for (r, o) in out.iter().enumerate() {
            if let Some(o) = o {
                assert_eq!(
                    o,
                    &Ok(Decision {
                        excluded: set(n, failed),
                        base
                    }),
                    "rank {r}"
                );
            }
        }
    }

    #[test]
    fn survivors_that_saw_the_failure_differently_decide_alike() {
        // Rank 2 is dead; rank 1 saw it, ranks 0 and 3 only heard of an abort.
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]] {
            let mut net = Net::new(4, &[&[], &[2], &[], &[]], &[7, 9, 0, 8]);
            net.kill(2);
            let out = net.run(&order, None);
            all_decided(&out, &[2], 9);
        }
    }

    #[test]
    fn the_dead_rank_0_coordinates_nothing() {
        let mut net = Net::new(4, &[&[], &[0], &[], &[0]], &[5, 5, 5, 5]);
        net.kill(0);
        all_decided(&net.run(&[3, 2, 1, 0], None), &[0], 5);
    }

    #[test]
    fn two_failures_at_once() {
        let mut net = Net::new(4, &[&[], &[0], &[3], &[]], &[1, 1, 1, 1]);
        net.kill(0);
        net.kill(3);
        all_decided(&net.run(&[0, 1, 2, 3], None), &[0, 3], 1);
    }

    #[test]
    fn a_coordinator_that_dies_halfway_through_its_decision_leaves_no_survivor_without_it() {
        // Rank 1 (rank 0 dead) decides {0} and dies after sending it to rank 2 only:
        // rank 2 passes it on, so ranks 3 and 4 get the same set, though rank 1 is dead
        // now too (the new group's first call names it).
        for order in [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]] {
            let mut net = Net::new(5, &[&[], &[0], &[0], &[0], &[0]], &[3; 5]);
            net.kill(0);
            // Rank 1's messages: DECIDE to 0 (dead), then 2, 3, 4: it dies after two.
            // The proposals reach rank 1 first.
            net.step(None);
            net.deliver(&order);
            let out = net.run(&order, Some((1, 2)));
            assert!(net.dead[1]);
            all_decided(&out, &[0], 3);
        }
    }

    #[test]
    fn a_coordinator_that_dies_before_deciding_is_replaced_and_suspected() {
        let mut net = Net::new(4, &[&[], &[], &[], &[]], &[2; 4]);
        net.kill(1);
        // Nobody knows yet: everyone proposes to rank 0, which waits for rank 1... then
        // rank 0 dies too, before deciding.
        net.step(None);
        net.deliver(&[0, 1, 2, 3]);
        net.kill(0);
        all_decided(&net.run(&[3, 2, 1, 0], None), &[0, 1], 2);
    }

    #[test]
    fn a_failure_during_the_agreement_joins_the_set() {
        // Rank 3 dies; while rank 0 waits for proposals, rank 2 dies too.
        let mut net = Net::new(4, &[&[3], &[3], &[], &[]], &[4; 4]);
        net.kill(3);
        net.step(None);
        net.kill(2);
        all_decided(&net.run(&[1, 0, 2, 3], None), &[2, 3], 4);
    }

    #[test]
    fn a_rank_left_out_learns_it() {
        // Rank 2 was stopped: the others decided without it; it wakes and reads.
        let mut net = Net::new(3, &[&[2], &[2], &[]], &[1; 3]);
        // Rank 2 sleeps: its messages go nowhere until the others are done.
        net.dead[2] = true;
        let out = net.run(&[0, 1], None);
        all_decided(&out, &[2], 1);
        net.dead[2] = false;
        let out = net.run(&[0, 1, 2], None);
        assert_eq!(out[2], Some(Err(Refusal::Excluded)));
    }

    #[test]
    fn the_caller_excludes_a_healthy_rank() {
        let mut net = Net::new(3, &[&[1], &[1], &[1]], &[6; 3]);
        net.dead[1] = true; // it does not take part
        all_decided(&net.run(&[0, 2], None), &[1], 6);
    }

    #[test]
    fn messages_read_back_as_sent() {
        for n in [1, 7, 8, 9, 100] {
            let d = Message::Decide(Decision {
                excluded: (0..n).map(|r| r % 3 == 1).collect(),
                base: 0xdead_beef,
            });
            assert_eq!(Message::decode(&d.encode(), n), Some(d.clone()));
            let p = Message::Propose {
                suspects: (0..n).map(|r| r == n - 1).collect(),
                seq: 17,
            };
            assert_eq!(Message::decode(&p.encode(), n), Some(p));
            assert_eq!(Message::decode(&d.encode(), n + 8), None);
        }
    }
}
