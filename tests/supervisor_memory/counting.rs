//! A global allocator that counts the bytes live on each thread, so a test on a
//! current-thread runtime can see whether memory grows with the work it repeats; the other
//! tests of the binary, on other threads, do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// `System`, counting.
pub(crate) struct Counting;

fn add(bytes: isize) {
    // `try_with`: during a thread's teardown the count is gone; nothing to record then.
    let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
}

fn signed(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which `System` shares.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            add(signed(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) };
        add(-signed(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            add(signed(new_size) - signed(layout.size()));
        }
        new
    }
}

/// Bytes allocated on this thread and not freed on it.
pub(crate) fn live_on_this_thread() -> isize {
    LIVE.with(Cell::get)
}
