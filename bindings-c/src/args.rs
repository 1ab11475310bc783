//! Reading C arguments: every pointer is checked for NULL and every string
//! for UTF-8 before a call does anything, so a bad argument is an error that
//! names it, never a crash. Out-parameters are checked first and written
//! last, only on success.

use std::ffi::{c_char, CStr};

use crate::errors::{Failure, Outcome};

/// `*ptr`, or a `null_argument` error naming `name`.
///
/// # Safety
/// A non-NULL `ptr` must point to a live `T` for `'a`.
pub(crate) unsafe fn reference<'a, T>(ptr: *const T, name: &str) -> Outcome<&'a T> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::null(name))
}

/// `&mut *ptr`, or a `null_argument` error naming `name`.
///
/// # Safety
/// A non-NULL `ptr` must point to a live `T` that nothing else uses for `'a`.
pub(crate) unsafe fn exclusive<'a, T>(ptr: *mut T, name: &str) -> Outcome<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::null(name))
}

/// An out-parameter, checked for NULL before the call does anything.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// # Safety
    /// A non-NULL `ptr` must be writable for one `T`.
    pub(crate) unsafe fn new(ptr: *mut T, name: &str) -> Outcome<Self> {
        if ptr.is_null() {
            return Err(Failure::null(name));
        }
        Ok(Out(ptr))
    }

    /// Writes the call's result; the last step of a successful call.
    pub(crate) fn write(self, value: T) {
        // SAFETY: checked non-NULL in `new`, writable by the caller's contract.
        unsafe { self.0.write(value) }
    }
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string live for `'a`.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, name: &str) -> Outcome<&'a str> {
    if ptr.is_null() {
        return Err(Failure::null(name));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|e| Failure::utf8(name, bytes, e))
}

/// The `paths_len` scope paths at `paths`, each named `paths[i]` in errors.
///
/// # Safety
/// As [`slice`], and each non-NULL item NUL-terminated and live for `'a`.
pub(crate) unsafe fn paths<'a>(paths: *const *const c_char, paths_len: usize) -> Outcome<Vec<&'a str>> {
    // SAFETY: the caller's contract.
    let list = unsafe { slice(paths, paths_len, "paths")? };
    list.iter()
        .enumerate()
        // SAFETY: each is NULL or NUL-terminated by the caller's contract.
        .map(|(i, &path)| unsafe { text(path, &format!("paths[{i}]")) })
        .collect()
}

/// `len` items at `ptr`. NULL is allowed only with `len` 0 (an empty array).
///
/// # Safety
/// A non-NULL `ptr` must point to `len` initialized items live for `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize, name: &str) -> Outcome<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::null(name));
    }
    // No allocation holds more than isize::MAX bytes: a larger length is
    // garbage, and building the slice from it would be undefined behaviour.
    if len > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(Failure::argument(&format!("{name}_len"), len, "longer than any array can be"));
    }
    // SAFETY: non-NULL, length bounded, initialized by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// `len` bytes of UTF-8 text at `ptr` (NULL allowed with `len` 0).
///
/// # Safety
/// As [`slice`].
pub(crate) unsafe fn utf8<'a>(ptr: *const c_char, len: usize, name: &str) -> Outcome<&'a str> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { slice(ptr.cast::<u8>(), len, name) }?;
    std::str::from_utf8(bytes).map_err(|e| Failure::utf8(name, bytes, e))
}
