//! A rank's three buffers during one call, addressed by resolved [`Location`]s.

use crate::element::Element;
use crate::schedule::plan::{Location, Store};

/// The caller's buffers and the engine's scratch for one call.
///
/// In place, the single caller buffer is `output` and `input` is empty: the plan resolves
/// every input slice into `output` ([`crate::schedule::plan::resolve`]).
pub struct Memory<'a, T> {
    /// Out-of-place input (empty in place).
    pub input: &'a [T],
    /// Output, or the single buffer in place.
    pub output: &'a mut [T],
    /// Scratch.
    pub scratch: &'a mut [T],
}

/// A location the plan promised exists does not: the buffers do not match the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange(pub Location);

/// Operands of a primitive that reads one location and writes another.
pub enum SrcDst<'m, T> {
    /// Distinct memory.
    Disjoint(&'m [T], &'m mut [T]),
    /// The same memory (reduce in place).
    Same(&'m mut [T]),
}

impl<T: Element> Memory<'_, T> {
    fn store(&self, store: Store) -> &[T] {
        match store {
            Store::Input => self.input,
            Store::Output => self.output,
            Store::Scratch => self.scratch,
        }
    }

    /// The elements at `loc`.
    pub fn read(&self, loc: Location) -> Result<&[T], OutOfRange> {
        self.store(loc.store)
            .get(loc.offset..loc.offset + loc.len)
            .ok_or(OutOfRange(loc))
    }

    /// The elements at `loc`, to write.
    pub fn write(&mut self, loc: Location) -> Result<&mut [T], OutOfRange> {
        let store: &mut [T] = match loc.store {
            Store::Input => return Err(OutOfRange(loc)),
            Store::Output => self.output,
            Store::Scratch => self.scratch,
        };
        store
            .get_mut(loc.offset..loc.offset + loc.len)
            .ok_or(OutOfRange(loc))
    }

    /// `src` to read and `dst` to write at once (identical or disjoint; the plan rejects
    /// partial overlaps).
    pub fn read_write(
        &mut self,
        src: Location,
        dst: Location,
    ) -> Result<SrcDst<'_, T>, OutOfRange> {
        if src == dst {
            return self.write(dst).map(SrcDst::Same);
        }
        let range = |l: Location| l.offset..l.offset + l.len;
        let (s, d): (&[T], &mut [T]) = match (src.store, dst.store) {
            (_, Store::Input) => return Err(OutOfRange(dst)),
            (Store::Input, Store::Output) => (self.input, &mut *self.output),
            (Store::Input, Store::Scratch) => (self.input, &mut *self.scratch),
            (Store::Output, Store::Scratch) => (&*self.output, &mut *self.scratch),
            (Store::Scratch, Store::Output) => (&*self.scratch, &mut *self.output),
            (Store::Output, Store::Output) | (Store::Scratch, Store::Scratch) => {
                let buf: &mut [T] = if dst.store == Store::Output {
                    self.output
                } else {
                    self.scratch
                };
                return split(buf, src, dst).ok_or(OutOfRange(dst));
            }
        };
        let s = s.get(range(src)).ok_or(OutOfRange(src))?;
        let d = d.get_mut(range(dst)).ok_or(OutOfRange(dst))?;
        Ok(SrcDst::Disjoint(s, d))
    }
}

/// Borrows two disjoint ranges of one buffer.
fn split<T>(buf: &mut [T], src: Location, dst: Location) -> Option<SrcDst<'_, T>> {
    if src.offset + src.len > buf.len() || dst.offset + dst.len > buf.len() {
        return None;
    }
    if src.len == 0 {
        return Some(SrcDst::Disjoint(
            &[],
            buf.get_mut(dst.offset..dst.offset + dst.len)?,
        ));
    }
    if src.offset < dst.offset {
        let (a, b) = buf.split_at_mut(dst.offset);
        let s = a.get(src.offset..src.offset + src.len)?;
        Some(SrcDst::Disjoint(s, b.get_mut(..dst.len)?))
    } else {
        let (a, b) = buf.split_at_mut(src.offset);
        let d = a.get_mut(dst.offset..dst.offset + dst.len)?;
        Some(SrcDst::Disjoint(b.get(..src.len)?, d))
    }
}
