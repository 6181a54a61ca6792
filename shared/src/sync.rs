//! Locking shared by modules whose mutexes guard state that stays sound if a holder panics.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poison. Only for state a panicking holder cannot leave half-changed;
/// each caller says why its state is such.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
