//! The permits a governor has handed to JavaScript, behind numeric handles.
//!
//! A JavaScript object per permit made by the addon would cost more than the
//! whole reservation (an N-API class instance is a constructor call plus a
//! wrap and a finalizer). So permits stay here, in a slab, and JavaScript
//! holds a number: the slot's generation × 2^32 + its index, below 2^53.
//! The generation makes a stale handle (its slot reused) miss rather than
//! reach another permit.
//!
//! A permit that JavaScript dropped without settling or cancelling is left to
//! expire, as in the core; its slot is reclaimed by a sweep once it has
//! expired (the core would refuse to settle it then anyway), so forgotten
//! permits cannot grow the slab without bound.

use llmgov::Permit;

/// Handles carry 21 bits of generation so that they stay safe integers.
const GENERATION_LIMIT: u32 = 1 << 21;
/// Live permits below which the slab never sweeps.
const FIRST_SWEEP: usize = 1024;

struct Slot {
    generation: u32,
    permit: Option<Permit>,
}

/// Live permits by handle.
#[derive(Default)]
pub struct Permits {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    sweep_at: usize,
}

impl Permits {
    /// Stores a permit; returns its handle. Sweeps expired permits first
    /// when the slab has grown (amortized O(1)).
    pub fn insert(&mut self, permit: Permit, now: u64) -> f64 {
        if self.free.is_empty() && self.live >= self.sweep_at.max(FIRST_SWEEP) {
            self.sweep(now);
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot { generation: 0, permit: None });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.permit = Some(permit);
        self.live += 1;
        handle(slot.generation, index)
    }

    /// The live permit behind `handle`, if it has not been removed or swept.
    #[inline]
    pub fn get(&mut self, handle: f64) -> Option<&mut Permit> {
        let (generation, index) = split(handle)?;
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.permit.as_mut()
    }

    /// Frees the slot behind `handle` (its permit reconciled or expired).
    #[inline]
    pub fn remove(&mut self, handle: f64) {
        let Some((generation, index)) = split(handle) else { return };
        if let Some(slot) = self.slots.get_mut(index as usize) {
            if slot.generation == generation && slot.permit.take().is_some() {
                self.release(index);
            }
        }
    }

    /// Permits held now.
    pub fn live(&self) -> usize {
        self.live
    }

    fn release(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.generation = (slot.generation + 1) % GENERATION_LIMIT;
        self.live -= 1;
        self.free.push(index);
    }

    /// Frees every slot whose permit has expired by `now`.
    fn sweep(&mut self, now: u64) {
        for index in 0..self.slots.len() {
            let expired = self.slots[index].permit.as_ref().is_some_and(|p| p.expires_at() <= now);
            if expired {
                self.slots[index].permit = None;
                self.release(index as u32);
            }
        }
        self.sweep_at = self.live.saturating_mul(2);
    }
}

#[inline]
fn handle(generation: u32, index: u32) -> f64 {
    (u64::from(generation) << 32 | u64::from(index)) as f64
}

/// A handle's generation and index; `None` for a number no handle can be.
#[inline]
fn split(handle: f64) -> Option<(u32, u32)> {
    if !(handle >= 0.0 && handle < (1u64 << 53) as f64 && handle.fract() == 0.0) {
        return None;
    }
    let bits = handle as u64;
    Some(((bits >> 32) as u32, bits as u32))
}
