//! Shared machinery for tree-shaped algorithms (`single_root`, `tree`, `binomial_tree`,
//! `naive_ring`, `double_binary_tree`): a [`Tree`] over ranks and the four phases that move
//! data along it — [`reduce_up`], [`broadcast_down`], [`gather_up`], [`scatter_down`] — and
//! [`compose`], which builds every collective a tree can serve from those phases.
//!
//! Steps: going up, a rank sends in the step equal to its height (leaves at 0), so a phase
//! takes `height(root)` rounds; going down, a rank sends in the step equal to its depth.
//! Steps only price the schedule: the engine streams segments through the tree (an
//! interior rank forwards segment k while segment k+1 is still on its way up, and the root
//! starts broadcasting the first reduced segment before the last one has arrived).
//! Phases take absolute step offsets and report how many steps they use (the same on every
//! rank), so phases compose without skewing the rounds of different ranks.

use rcoll_transport::Rank;

use crate::schedule::{Collective, Layout, Primitive, Schedule, Slice};

/// A rooted tree over the ranks `0..n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    root: Rank,
    parent: Vec<Option<Rank>>,
    children: Vec<Vec<Rank>>,
    height: Vec<usize>,
    depth: Vec<usize>,
    /// [`Tree::phase_steps`], measured once.
    phase_steps: usize,
}

/// Which tree [`memo`] keeps: its shape's name, ranks and root.
pub(crate) type TreeKey = (&'static str, usize, Rank);

thread_local! {
    static BUILT: std::cell::RefCell<super::recent::Recent<TreeKey, std::rc::Rc<Tree>>> =
        const { std::cell::RefCell::new(super::recent::Recent::new(8)) };
}

/// The tree `key` names, built by `build` unless this thread built it recently (every
/// rank of a layout builds the same one: see [`super::recent`]).
pub(crate) fn memo(key: TreeKey, build: impl FnOnce() -> Tree) -> std::rc::Rc<Tree> {
    super::recent::recall(&BUILT, key, || std::rc::Rc::new(build()))
}

impl Tree {
    /// Builds the tree whose parent of `r` is `parent(r)` (`None` only for the root);
    /// children are listed in ascending rank order.
    pub fn new(n: usize, parent: impl Fn(usize) -> Option<usize>) -> Tree {
        let parent: Vec<Option<Rank>> = (0..n).map(|r| parent(r).map(Rank::from)).collect();
        let mut children = vec![Vec::new(); n];
        let mut root = Rank(0);
        for (r, p) in parent.iter().enumerate() {
            match p {
                Some(p) => children[p.index()].push(Rank::from(r)),
                None => root = Rank::from(r),
            }
        }
        let mut t = Tree {
            root,
            parent,
            children,
            height: vec![0; n],
            depth: vec![0; n],
            phase_steps: 0,
        };
        t.measure();
        t
    }

    /// Builds a tree in *virtual* ranks (the root is virtual rank 0) and relabels virtual
    /// rank `v` as real rank `(v + root) mod n`.
    pub fn rooted_at(
        n: usize,
        root: Rank,
        virtual_parent: impl Fn(usize) -> Option<usize>,
    ) -> Tree {
        let real = |v: usize| (v + root.index()) % n;
        let virt = |r: usize| (r + n - root.index()) % n;
        Tree::new(n, |r| virtual_parent(virt(r)).map(real))
    }

    /// Like [`Tree::rooted_at`] over the ranks in `order` (a permutation): virtual rank `v`
    /// is the rank `v` places after `root` in `order`.
    pub fn rooted_at_order(
        order: &[Rank],
        root: Rank,
        virtual_parent: impl Fn(usize) -> Option<usize>,
    ) -> Tree {
        let n = order.len();
        let mut pos = vec![0; n];
        for (i, r) in order.iter().enumerate() {
            pos[r.index()] = i;
        }
        let base = pos[root.index()];
        let real = |v: usize| order[(base + v) % n].index();
        let virt = |r: usize| (pos[r] + n - base) % n;
        Tree::new(n, |r| virtual_parent(virt(r)).map(real))
    }

    /// Reorders every rank's children with `key` (ascending).
    pub fn sort_children_by_key<K: Ord>(mut self, key: impl Fn(Rank) -> K) -> Tree {
        for c in &mut self.children {
            c.sort_by_key(|r| key(*r));
        }
        self
    }

    fn measure(&mut self) {
        let order = self.preorder(self.root);
        for &r in &order {
            if let Some(p) = self.parent[r.index()] {
                self.depth[r.index()] = self.depth[p.index()] + 1;
            }
        }
        for &r in order.iter().rev() {
            let h = self.children[r.index()]
                .iter()
                .map(|c| self.height[c.index()] + 1)
                .max()
                .unwrap_or(0);
            self.height[r.index()] = h;
        }
        self.phase_steps = self
            .max_height()
            .max(self.depth.iter().copied().max().unwrap_or(0))
            + 1;
    }

    /// The root.
    pub fn root(&self) -> Rank {
        self.root
    }

    /// The parent of `r`.
    pub fn parent(&self, r: Rank) -> Option<Rank> {
        self.parent[r.index()]
    }

    /// The children of `r`.
    pub fn children(&self, r: Rank) -> &[Rank] {
        &self.children[r.index()]
    }

    /// Longest path from `r` down to a leaf (0 for leaves).
    pub fn height(&self, r: Rank) -> usize {
        self.height[r.index()]
    }

    /// Distance from the root.
    pub fn depth(&self, r: Rank) -> usize {
        self.depth[r.index()]
    }

    /// The tree's height.
    pub fn max_height(&self) -> usize {
        self.height(self.root)
    }

    /// Whether `r` has children.
    pub fn is_interior(&self, r: Rank) -> bool {
        !self.children[r.index()].is_empty()
    }

    /// `r` and its descendants in depth-first preorder (children in their order).
    pub fn preorder(&self, r: Rank) -> Vec<Rank> {
        let mut out = Vec::new();
        let mut stack = vec![r];
        while let Some(v) = stack.pop() {
            out.push(v);
            stack.extend(self.children[v.index()].iter().rev());
        }
        out
    }

    /// Number of steps a phase over this tree uses (up and down take the same).
    pub fn phase_steps(&self) -> usize {
        self.phase_steps
    }
}

/// Reduces `src` (every rank's contribution) up `tree` into `root_dst` at the root.
/// Interior ranks other than the root accumulate in `acc` (scratch, same length) when they
/// have more than one child. Returns the steps used.
pub fn reduce_up(
    s: &mut Schedule,
    tree: &Tree,
    step0: usize,
    src: Slice,
    root_dst: Slice,
    acc: Slice,
) -> usize {
    let me = s.rank;
    let step = step0 + tree.height(me);
    let kids = tree.children(me).to_vec();
    match tree.parent(me) {
        None => {
            let mut operand = src;
            for k in kids {
                s.push(
                    step,
                    Primitive::RecvReduceCopy {
                        from: k,
                        src: operand,
                        dst: root_dst,
                    },
                );
                operand = root_dst;
            }
        }
        Some(parent) => {
            let Some((&last, rest)) = kids.split_last() else {
                s.push(
                    step,
                    Primitive::Send {
                        to: vec![parent],
                        src,
                    },
                );
                return tree.phase_steps();
            };
            let mut operand = src;
            for &k in rest {
                s.push(
                    step,
                    Primitive::RecvReduceCopy {
                        from: k,
                        src: operand,
                        dst: acc,
                    },
                );
                operand = acc;
            }
            s.push(
                step,
                Primitive::RecvReduceSend {
                    from: last,
                    to: vec![parent],
                    src: operand,
                },
            );
        }
    }
    tree.phase_steps()
}

/// Broadcasts `root_src` from the root down `tree` into `dst` on every other rank.
/// Returns the steps used. (The root's own copy, if any, is the caller's.)
pub fn broadcast_down(
    s: &mut Schedule,
    tree: &Tree,
    step0: usize,
    root_src: Slice,
    dst: Slice,
) -> usize {
    let me = s.rank;
    let step = step0 + tree.depth(me);
    let kids = tree.children(me).to_vec();
    match tree.parent(me) {
        None if !kids.is_empty() => s.push(
            step,
            Primitive::Send {
                to: kids,
                src: root_src,
            },
        ),
        None => {}
        Some(p) if kids.is_empty() => s.push(step, Primitive::Recv { from: p, dst }),
        Some(p) => s.push(
            step,
            Primitive::RecvCopySend {
                from: p,
                to: kids,
                dst,
            },
        ),
    }
    tree.phase_steps()
}

/// Gathers every rank's `mine` up `tree` into `root_dst(q)` (for each rank `q` other than
/// the root) at the root. Ranks forward their subtree's blocks in preorder, through
/// scratch slots starting at `scratch_base`. Returns the steps used.
pub fn gather_up(
    s: &mut Schedule,
    tree: &Tree,
    step0: usize,
    mine: Slice,
    root_dst: impl Fn(Rank) -> Slice,
    scratch_base: usize,
) -> usize {
    let me = s.rank;
    let step = step0 + tree.height(me);
    let len = mine.len;
    match tree.parent(me) {
        None => {
            for &k in tree.children(me) {
                for q in tree.preorder(k) {
                    s.push(
                        step,
                        Primitive::Recv {
                            from: k,
                            dst: root_dst(q),
                        },
                    );
                }
            }
        }
        Some(parent) => {
            s.push(
                step,
                Primitive::Send {
                    to: vec![parent],
                    src: mine,
                },
            );
            let mut slot = 0;
            for &k in tree.children(me) {
                for _ in tree.preorder(k) {
                    let dst = Slice::scratch(scratch_base + slot * len, len);
                    s.push(
                        step,
                        Primitive::RecvCopySend {
                            from: k,
                            to: vec![parent],
                            dst,
                        },
                    );
                    slot += 1;
                }
            }
        }
    }
    tree.phase_steps()
}

/// Scatters `root_src(q)` from the root down `tree` into `mine` on each rank `q` other
/// than the root, forwarding through scratch slots at `scratch_base`. Returns the steps used.
pub fn scatter_down(
    s: &mut Schedule,
    tree: &Tree,
    step0: usize,
    root_src: impl Fn(Rank) -> Slice,
    mine: Slice,
    scratch_base: usize,
) -> usize {
    let me = s.rank;
    let step = step0 + tree.depth(me);
    let len = mine.len;
    match tree.parent(me) {
        None => {
            for &k in tree.children(me) {
                for q in tree.preorder(k) {
                    s.push(
                        step,
                        Primitive::Send {
                            to: vec![k],
                            src: root_src(q),
                        },
                    );
                }
            }
        }
        Some(parent) => {
            // The parent sends our subtree in preorder: our own block first, then each
            // child's subtree, which we forward through scratch.
            s.push(
                step,
                Primitive::Recv {
                    from: parent,
                    dst: mine,
                },
            );
            let mut slot = 0;
            for &k in tree.children(me).to_vec().iter() {
                for _ in tree.preorder(k) {
                    let dst = Slice::scratch(scratch_base + slot * len, len);
                    s.push(
                        step,
                        Primitive::RecvCopySend {
                            from: parent,
                            to: vec![k],
                            dst,
                        },
                    );
                    slot += 1;
                }
            }
        }
    }
    tree.phase_steps()
}

/// Builds `layout`'s collective from phases over `up` (reduce and gather) and `down`
/// (broadcast and scatter), both rooted at the collective's root (rank 0 if unrooted).
///
/// - all_reduce: reduce up into the root's output, broadcast it down;
/// - reduce / broadcast / gather / scatter: one phase;
/// - all_gather: gather into the root's output, broadcast the whole output down;
/// - reduce_scatter: reduce the whole input into root scratch, scatter its blocks down.
pub fn compose(layout: &Layout, rank: Rank, up: &Tree, down: &Tree) -> Schedule {
    let mut s = Schedule::new(*layout, rank);
    let (n, c) = (layout.nranks, layout.count);
    let is_root = rank == up.root();
    let copy_own = !layout.in_place;
    match layout.collective {
        Collective::AllReduce | Collective::Barrier => {
            let v = Slice::output(0, c);
            let used = reduce_up(&mut s, up, 0, Slice::input(0, c), v, Slice::scratch(0, c));
            broadcast_down(&mut s, down, used, v, v);
        }
        Collective::Reduce => {
            reduce_up(
                &mut s,
                up,
                0,
                Slice::input(0, c),
                Slice::output(0, c),
                Slice::scratch(0, c),
            );
        }
        Collective::Broadcast => {
            if is_root && copy_own {
                s.push(
                    0,
                    Primitive::Copy {
                        src: Slice::input(0, c),
                        dst: Slice::output(0, c),
                    },
                );
            }
            broadcast_down(&mut s, down, 0, Slice::input(0, c), Slice::output(0, c));
        }
        Collective::Gather | Collective::AllGather => {
            if is_root && copy_own {
                let dst = Slice::output(rank.index() * c, c);
                s.push(
                    0,
                    Primitive::Copy {
                        src: Slice::input(0, c),
                        dst,
                    },
                );
            }
            let block = |q: Rank| Slice::output(q.index() * c, c);
            let used = gather_up(&mut s, up, 0, Slice::input(0, c), block, 0);
            if layout.collective == Collective::AllGather {
                let all = Slice::output(0, n * c);
                broadcast_down(&mut s, down, used, all, all);
            }
        }
        Collective::Scatter => {
            if is_root && copy_own {
                let src = Slice::input(rank.index() * c, c);
                s.push(
                    0,
                    Primitive::Copy {
                        src,
                        dst: Slice::output(0, c),
                    },
                );
            }
            let block = |q: Rank| Slice::input(q.index() * c, c);
            scatter_down(&mut s, down, 0, block, Slice::output(0, c), 0);
        }
        Collective::ReduceScatter => {
            let total = Slice::scratch(0, n * c);
            let acc = Slice::scratch(n * c, n * c);
            let used = reduce_up(&mut s, up, 0, Slice::input(0, n * c), total, acc);
            if is_root {
                let src = Slice::scratch(rank.index() * c, c);
                s.push(
                    used,
                    Primitive::Copy {
                        src,
                        dst: Slice::output(0, c),
                    },
                );
            }
            let block = |q: Rank| Slice::scratch(q.index() * c, c);
            scatter_down(&mut s, down, used, block, Slice::output(0, c), 2 * n * c);
        }
        Collective::AllToAll | Collective::SendRecv => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights_depths_and_preorder() {
        // 0 <- 1 <- 2, 0 <- 3
        let t = Tree::new(4, |r| [None, Some(0), Some(1), Some(0)][r]);
        assert_eq!(t.root(), Rank(0));
        assert_eq!(t.max_height(), 2);
        assert_eq!(t.depth(Rank(2)), 2);
        assert_eq!(t.preorder(Rank(0)), [Rank(0), Rank(1), Rank(2), Rank(3)]);
        assert_eq!(t.phase_steps(), 3);
    }

    #[test]
    fn rooted_at_relabels_virtual_ranks() {
        let star = Tree::rooted_at(4, Rank(2), |v| (v != 0).then_some(0));
        assert_eq!(star.root(), Rank(2));
        assert_eq!(star.children(Rank(2)), [Rank(0), Rank(1), Rank(3)]);
    }
}
