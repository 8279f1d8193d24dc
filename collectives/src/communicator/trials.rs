//! Selection by trial at run time ([`crate::autotune`]) in a communicator: which calls
//! it decides, the candidates, the trial calls' reuse, and the agreement after them.

use crate::algorithm::Algorithm;
use crate::autotune::{self, Next};
use crate::error::Result;
use crate::op::ReduceOp;
use crate::schedule::{Collective, Layout};

use super::Communicator;

impl Communicator {
    /// The size bucket of `layout` that selection by trial decides, if it is on and `Auto`
    /// chooses for this call (nothing forced, two ranks or more).
    pub(super) fn tune_key(
        &self,
        layout: &Layout,
        elem_size: usize,
        forced: Option<Algorithm>,
    ) -> Option<autotune::Key> {
        let forced = forced.is_some()
            || matches!(self.config.algorithm, Some(a) if a.serves(layout.collective));
        // A barrier or an empty call moves nothing to choose for.
        let nothing = layout.collective == Collective::Barrier || layout.count == 0;
        if forced || nothing || self.tuner.is_none() || self.nranks < 2 {
            return None;
        }
        let bytes = layout.count.saturating_mul(elem_size);
        Some(autotune::Key {
            collective: layout.collective,
            bucket_bytes: bytes.checked_next_power_of_two().unwrap_or(usize::MAX),
            elem_size,
        })
    }

    /// The algorithm of a call in `key`'s bucket under selection by trial, and whether it
    /// is a trial.
    pub(super) fn choose_by_trial(
        &mut self,
        key: autotune::Key,
        layout: &Layout,
        elem_size: usize,
    ) -> Result<(Algorithm, bool)> {
        // A settled bucket is one lookup: a call prepares anew when none of the last few
        // had its arguments (`execute::PREPARED_CALLS`). (At
        // 8 B on 2 shared-memory ranks, auto over its choice forced in the same rounds of
        // `--algo all`, when each block's first call prepared anew: 1.02-1.10 this way,
        // 1.06-1.17 through the four lookups and the model's choice below, over 4
        // interleaved runs.)
        if let Some(Next::Settled(a)) = self.tuner.as_ref().and_then(|t| t.upcoming(&key)) {
            return Ok((a, false));
        }
        // Priced out of place, as the candidates are: every rank the same.
        let out_of_place = Layout {
            in_place: false,
            ..*layout
        };
        let fallback = self.choose(&out_of_place, elem_size, None)?;
        let Some(mut tuner) = self.tuner.take() else {
            return Ok((fallback, false));
        };
        let next = tuner.next(key, fallback, || self.candidates(layout, elem_size));
        self.tuner = Some(tuner);
        Ok(match next {
            Next::Settled(a) => (a, false),
            Next::Trial(a) => (a, true),
        })
    }

    /// Whether the next call can reuse a call that ran `algorithm` (a trial of `trial`'s
    /// bucket, if any): it was no trial, or the next trial of its bucket runs the same
    /// algorithm (a block of trials; the call is then counted). Reused, a trial costs what
    /// the calls of a settled bucket do; prepared anew each time (and run in turn with the
    /// others), a small call's trials timed several times what it takes in a loop
    /// (measured: docs/src/algorithms.md, "How the trials' numbers were set").
    pub(super) fn trial_goes_on(
        &mut self,
        trial: Option<autotune::Key>,
        algorithm: Algorithm,
    ) -> bool {
        let (Some(k), Some(tuner)) = (trial, self.tuner.as_mut()) else {
            return trial.is_none();
        };
        let same = tuner.upcoming(&k) == Some(Next::Trial(algorithm));
        if same {
            tuner.next(k, algorithm, Vec::new);
        }
        same
    }

    /// What selection by trial tries for `layout`'s bucket: the tuning file's rule for it
    /// first, then every algorithm the model prices within
    /// [`autotune::CANDIDATE_SPREAD`] times the cheapest, cheapest first. Priced out of
    /// place whatever this rank's call is, so that every rank has the same list.
    fn candidates(&self, layout: &Layout, elem_size: usize) -> Vec<Algorithm> {
        let canonical = crate::select::bucket(
            &Layout {
                in_place: false,
                ..*layout
            },
            elem_size,
        );
        let bytes = layout.count.saturating_mul(elem_size);
        let rule = self.config.tuning.as_ref().and_then(|t| {
            t.rule(self.tuning_key, layout.collective, self.nranks, bytes)
                .filter(|a| a.serves(layout.collective))
        });
        let levels = self.hosts.as_deref().map(|hosts| self.levels_on(hosts));
        let ranked = crate::select::rank_algorithms(
            &canonical,
            elem_size,
            &self.config.cost_model,
            levels.as_ref(),
        );
        let cheapest = ranked.first().map_or(0.0, |(_, c)| c.predicted_us);
        let mut out: Vec<Algorithm> = rule.into_iter().collect();
        for (a, c) in ranked {
            if c.predicted_us <= autotune::CANDIDATE_SPREAD * cheapest && !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }

    /// After a trial of `algorithm` on `key` that took `us` here: when it ends the first
    /// passes or the last, the ranks agree on each candidate's time on the slowest rank (one
    /// all_reduce), and drop the slow candidates or settle on the cheapest.
    pub(super) fn after_trial(
        &mut self,
        key: autotune::Key,
        algorithm: Algorithm,
        us: f64,
    ) -> Result<()> {
        let Some(agree) = self
            .tuner
            .as_mut()
            .and_then(|t| t.record(&key, algorithm, us))
        else {
            return Ok(());
        };
        let (mut agreed, first_pass) = match agree {
            autotune::Agree::FirstPasses(times) => (times, true),
            autotune::Agree::Final(times) => (times, false),
        };
        self.next_algorithm = Some(Algorithm::RecursiveDoubling);
        self.all_reduce_in_place(&mut agreed, ReduceOp::Max)?;
        if first_pass {
            tracing::debug!(
                rank = self.rank.0,
                collective = %key.collective,
                bytes = key.bucket_bytes,
                agreed = ?agreed,
                "autotune: first passes"
            );
        }
        let settled = self.tuner.as_mut().and_then(|t| match first_pass {
            true => t.prune(&key, &agreed),
            false => t.settle(&key, &agreed),
        });
        if let Some((chosen, tried)) = settled {
            let times: Vec<String> = tried
                .iter()
                .zip(&agreed)
                .map(|(a, t)| match t.is_finite() {
                    true => format!("{a} {t:.1} us"),
                    false => format!("{a} dropped after the first passes"),
                })
                .collect();
            tracing::info!(
                rank = self.rank.0,
                collective = %key.collective,
                bytes = key.bucket_bytes,
                chosen = %chosen,
                tried = %times.join(", "),
                "autotune"
            );
        }
        Ok(())
    }
}
