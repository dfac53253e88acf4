//! A SQLite VFS whose connections to one database file share one memory
//! map.
//!
//! SQLite's own memory map (`PRAGMA mmap_size`) belongs to a connection,
//! and a connection unmaps it whenever it finds that another connection
//! committed: at the start of its next read transaction
//! (`sqlite3OsUnfetch(fd, 0, 0)`, because POSIX says nothing of a map
//! over a file that another process truncated and extended again). The
//! next read faults every page it touches into a fresh map, and the
//! `munmap` itself takes the process's address-space lock for writing, so
//! under a steady trickle of commits a process with many reader
//! connections spends its time unmapping and faulting (a quarter of the
//! CPU of a 90 % recall / 10 % remember workload on 2 cores, more with
//! more cores) instead of reading.
//!
//! This VFS wraps the `unix` VFS and changes only that. The main database
//! file's `xFetch` hands out pages of one read-only `MAP_SHARED` map of the
//! file, made once per file (device and inode) per process and shared by
//! every connection to it; `xUnfetch(0, 0)` — SQLite's "unmap everything"
//! — only refreshes the connection's idea of the file's size. The map
//! lives while any connection holds it.
//!
//! Why this is as sound as SQLite's own map (Linux only; elsewhere
//! [`register`] answers `None` and callers keep the default VFS):
//! - A `MAP_SHARED` map shows the file's page cache: the bytes at an
//!   offset are the bytes `read()` would give now, in any map of the file,
//!   shared or not. SQLite never writes through a map (it maps read-only
//!   and writes with `pwrite`).
//! - Pages are handed out only below the file size this connection last
//!   read (`fstat`, at its first fetch and at each of SQLite's unmap
//!   requests, when SQLite's own VFS would map afresh) less SQLite's
//!   256-byte over-read margin, and below the connection's `mmap_size`:
//!   the same bound SQLite's own map has. A truncation by this connection
//!   lowers it at once, as SQLite's does.
//! - On Linux a truncation removes the cut pages from every map of the
//!   file, and an extension faults fresh pages in: the case SQLite unmaps
//!   for (truncated and extended again by another process) reads the
//!   file's current bytes here too.
//! - A pointer handed out stays valid until SQLite releases it: the map is
//!   unmapped only when the last connection holding it closes, and SQLite
//!   releases every page before it closes a file.
//! - The map is of the file SQLite opened: this VFS opens the path again
//!   and then asks SQLite's file whether the path still names its file
//!   (`SQLITE_FCNTL_HAS_MOVED`); if not, the connection reads without a
//!   map.
//!
//! Every other call goes to the `unix` VFS unchanged (locks, the
//! write-ahead log's shared memory, reads, writes, syncs).
#![cfg_attr(not(target_os = "linux"), forbid(unsafe_code))]

/// The name the VFS is registered under.
pub const NAME: &str = "strata-shared-map";

/// Registers the VFS (once per process) and returns its name for
/// `sqlite3_open_v2`, or `None` where it is not available (not Linux, or
/// SQLite has no `unix` VFS): open with the default VFS then.
pub fn register() -> Option<&'static str> {
    imp::register()
}

/// Connections that hold the shared map of the file at `path` now (0 when
/// none does, or where the VFS is not available). For tests and
/// diagnostics.
pub fn map_users(path: &std::path::Path) -> usize {
    imp::map_users(path)
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn register() -> Option<&'static str> {
        None
    }

    pub fn map_users(_: &std::path::Path) -> usize {
        0
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::os::unix::fs::MetadataExt;
    use std::ptr;
    use std::sync::{Arc, Mutex, OnceLock, Weak};

    use rusqlite::ffi;

    const NAME_C: &CStr = c"strata-shared-map";

    /// SQLite's default ceiling on a map (`SQLITE_MAX_MMAP_SIZE`): a larger
    /// `mmap_size` is cut to it, as SQLite's own VFS does.
    const MAX_MAP: i64 = 0x7fff_0000;

    /// Bytes SQLite may read past a page of a damaged file: a page is
    /// handed out only when this much of the file follows it (as in
    /// SQLite's `unixFetch`).
    const EOF_MARGIN: i64 = 256;

    /// One read-only map of a file, shared by the connections to it.
    #[derive(Debug)]
    struct SharedMap {
        base: *mut u8,
        len: usize,
    }

    // SAFETY: the map is read-only memory owned by this value; reading it
    // from any thread is fine, and it is unmapped once, on drop.
    unsafe impl Send for SharedMap {}
    // SAFETY: as above: nothing writes through it.
    unsafe impl Sync for SharedMap {}

    impl Drop for SharedMap {
        fn drop(&mut self) {
            // SAFETY: `base`/`len` are the map `mmap` returned, unmapped
            // only here; no connection holds a page of it any more (each
            // holder keeps an `Arc`, released after SQLite released every
            // page it fetched).
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }

    /// The maps of this process, by file (device, inode).
    type Maps = Mutex<HashMap<(u64, u64), Weak<SharedMap>>>;

    fn maps() -> &'static Maps {
        static MAPS: OnceLock<Maps> = OnceLock::new();
        MAPS.get_or_init(Default::default)
    }

    /// The map of `file` (already open), at least `len` bytes long: the
    /// one in use, or a new one.
    fn shared_map(file: &std::fs::File, len: usize) -> Option<Arc<SharedMap>> {
        let meta = file.metadata().ok()?;
        let key = (meta.dev(), meta.ino());
        let mut all = maps().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = all.get(&key).and_then(Weak::upgrade)
            && m.len >= len
        {
            return Some(m);
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh read-only shared map of an open file; mapping
        // past the end of the file is allowed (only touching such pages
        // faults, and fetches stay below the file's size).
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let m = Arc::new(SharedMap {
            base: base.cast(),
            len,
        });
        all.retain(|_, w| w.strong_count() > 0);
        all.insert(key, Arc::downgrade(&m));
        Some(m)
    }

    pub fn map_users(path: &std::path::Path) -> usize {
        let Ok(meta) = std::fs::metadata(path) else {
            return 0;
        };
        let all = maps().lock().unwrap_or_else(|p| p.into_inner());
        all.get(&(meta.dev(), meta.ino()))
            .map_or(0, Weak::strong_count)
    }

    /// What this VFS keeps for a main database file.
    #[derive(Debug)]
    struct MapState {
        /// The path SQLite opened (valid until `xClose`).
        path: *const c_char,
        /// The connection's `mmap_size` (bytes; 0: no map).
        limit: i64,
        /// The shared map, once a fetch asked for it.
        map: Option<Arc<SharedMap>>,
        /// The file's size when last read: pages are handed out below it.
        size: i64,
        /// Pages handed out and not yet released.
        out: usize,
        /// The map could not be made (or the path no longer names the
        /// file): read without one.
        failed: bool,
    }

    /// The file SQLite allocates (`szOsFile`): ours, then the `unix` VFS's.
    #[repr(C)]
    struct MapFile {
        base: ffi::sqlite3_file,
        /// `Some` for a main database file.
        state: *mut MapState,
    }

    /// Where the wrapped file lies within a [`MapFile`] allocation.
    const INNER_AT: usize = std::mem::size_of::<MapFile>().next_multiple_of(8);

    fn inner(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
        // SQLite allocated `szOsFile` bytes: INNER_AT, then the wrapped
        // VFS's file.
        f.cast::<u8>().wrapping_add(INNER_AT).cast()
    }

    /// The wrapped file's methods.
    ///
    /// # Safety
    /// `f` is a file this VFS opened.
    unsafe fn methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
        // SAFETY: the wrapped file is open (its methods are set) whenever
        // SQLite calls a method of ours; SQLite's method tables are static.
        unsafe { &*(*inner(f)).pMethods }
    }

    /// # Safety
    /// `f` is a file this VFS opened.
    unsafe fn state<'a>(f: *mut ffi::sqlite3_file) -> Option<&'a mut MapState> {
        // SAFETY: `state` is null or the box `x_open` made, freed only by
        // `x_close`; SQLite calls a file's methods from one thread at a
        // time.
        unsafe { (*f.cast::<MapFile>()).state.as_mut() }
    }

    static VFS: OnceLock<Option<&'static str>> = OnceLock::new();

    pub fn register() -> Option<&'static str> {
        *VFS.get_or_init(|| {
            // SAFETY: `sqlite3_vfs_find` initializes SQLite and returns a
            // registered VFS (static for the process) or null.
            let unix = unsafe { ffi::sqlite3_vfs_find(c"unix".as_ptr()) };
            if unix.is_null() {
                return None;
            }
            // SAFETY: non-null, a registered VFS.
            let u = unsafe { &*unix };
            let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
                iVersion: u.iVersion.min(3),
                szOsFile: i32::try_from(INNER_AT).ok()? + u.szOsFile,
                mxPathname: u.mxPathname,
                pNext: ptr::null_mut(),
                zName: NAME_C.as_ptr(),
                pAppData: unix.cast(),
                xOpen: Some(x_open),
                xDelete: Some(x_delete),
                xAccess: Some(x_access),
                xFullPathname: Some(x_full_pathname),
                xDlOpen: Some(x_dl_open),
                xDlError: Some(x_dl_error),
                xDlSym: Some(x_dl_sym),
                xDlClose: Some(x_dl_close),
                xRandomness: Some(x_randomness),
                xSleep: Some(x_sleep),
                xCurrentTime: Some(x_current_time),
                xGetLastError: Some(x_get_last_error),
                xCurrentTimeInt64: Some(x_current_time_int64),
                xSetSystemCall: Some(x_set_system_call),
                xGetSystemCall: Some(x_get_system_call),
                xNextSystemCall: Some(x_next_system_call),
            }));
            // SAFETY: the VFS is leaked (lives for the process), never the
            // default, registered once (under the `OnceLock`).
            let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
            (rc == ffi::SQLITE_OK).then_some(super::NAME)
        })
    }

    /// The `unix` VFS this one wraps.
    ///
    /// # Safety
    /// `vfs` is this VFS.
    unsafe fn unix(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
        // SAFETY: `register` put the wrapped VFS in `pAppData`.
        unsafe { (*vfs).pAppData.cast() }
    }

    static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
        iVersion: 3,
        xClose: Some(x_close),
        xRead: Some(x_read),
        xWrite: Some(x_write),
        xTruncate: Some(x_truncate),
        xSync: Some(x_sync),
        xFileSize: Some(x_file_size),
        xLock: Some(x_lock),
        xUnlock: Some(x_unlock),
        xCheckReservedLock: Some(x_check_reserved_lock),
        xFileControl: Some(x_file_control),
        xSectorSize: Some(x_sector_size),
        xDeviceCharacteristics: Some(x_device_characteristics),
        xShmMap: Some(x_shm_map),
        xShmLock: Some(x_shm_lock),
        xShmBarrier: Some(x_shm_barrier),
        xShmUnmap: Some(x_shm_unmap),
        xFetch: Some(x_fetch),
        xUnfetch: Some(x_unfetch),
    };

    unsafe extern "C" fn x_open(
        vfs: *mut ffi::sqlite3_vfs,
        name: *const c_char,
        f: *mut ffi::sqlite3_file,
        flags: c_int,
        out_flags: *mut c_int,
    ) -> c_int {
        // SAFETY: SQLite passes this VFS and an allocation of `szOsFile`
        // bytes; the wrapped VFS opens into the part after ours.
        unsafe {
            let u = unix(vfs);
            let mf = f.cast::<MapFile>();
            (*mf).base.pMethods = ptr::null();
            (*mf).state = ptr::null_mut();
            let inner_f = inner(f);
            (*inner_f).pMethods = ptr::null();
            let Some(open) = (*u).xOpen else {
                return ffi::SQLITE_CANTOPEN;
            };
            let rc = open(u, name, inner_f, flags, out_flags);
            if (*inner_f).pMethods.is_null() {
                // Nothing to close: SQLite will not call xClose.
                return rc;
            }
            if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_MAIN_DB != 0 && !name.is_null() {
                (*mf).state = Box::into_raw(Box::new(MapState {
                    path: name,
                    limit: 0,
                    map: None,
                    size: 0,
                    out: 0,
                    failed: false,
                }));
            }
            (*mf).base.pMethods = &METHODS;
            rc
        }
    }

    unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
        // SAFETY: an open file of this VFS; its state box is freed here,
        // once (SQLite closes a file once), after SQLite released its pages.
        unsafe {
            let rc = match methods(f).xClose {
                Some(close) => close(inner(f)),
                None => ffi::SQLITE_OK,
            };
            let mf = f.cast::<MapFile>();
            if !(*mf).state.is_null() {
                drop(Box::from_raw((*mf).state));
                (*mf).state = ptr::null_mut();
            }
            rc
        }
    }

    /// The size of the wrapped file now (`fstat`), or `None`.
    ///
    /// # Safety
    /// `f` is an open file of this VFS.
    unsafe fn file_size(f: *mut ffi::sqlite3_file) -> Option<i64> {
        let mut size: ffi::sqlite3_int64 = 0;
        // SAFETY: the wrapped file is open; `size` outlives the call.
        let rc = unsafe { methods(f).xFileSize.map(|g| g(inner(f), &mut size)) };
        (rc == Some(ffi::SQLITE_OK)).then_some(size)
    }

    /// Opens the path again and maps it, if it still names SQLite's file.
    ///
    /// # Safety
    /// `f` is an open main database file of this VFS and `st` its state.
    unsafe fn acquire(f: *mut ffi::sqlite3_file, st: &mut MapState) {
        // SAFETY: SQLite keeps the name valid until xClose.
        let path = unsafe { CStr::from_ptr(st.path) };
        let Ok(path) = path.to_str() else {
            st.failed = true;
            return;
        };
        let Ok(file) = std::fs::File::open(path) else {
            st.failed = true;
            return;
        };
        // Opened first, checked second: if the path names SQLite's file
        // after `file` was opened, `file` is that file.
        let mut moved: c_int = 1;
        // SAFETY: the wrapped file is open; `moved` outlives the call.
        let rc = unsafe {
            methods(f).xFileControl.map(|fc| {
                fc(
                    inner(f),
                    ffi::SQLITE_FCNTL_HAS_MOVED,
                    (&mut moved as *mut c_int).cast(),
                )
            })
        };
        let Ok(len) = usize::try_from(st.limit) else {
            st.failed = true;
            return;
        };
        if rc != Some(ffi::SQLITE_OK) || moved != 0 {
            st.failed = true;
            return;
        }
        st.map = shared_map(&file, len);
        st.failed = st.map.is_none();
    }

    unsafe extern "C" fn x_fetch(
        f: *mut ffi::sqlite3_file,
        off: ffi::sqlite3_int64,
        amt: c_int,
        pp: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: SQLite passes an open file of this VFS and a place for
        // the pointer. A page is handed out only within the map and below
        // the file's size as last read (see the module's notes).
        unsafe {
            *pp = ptr::null_mut();
            let Some(st) = state(f) else {
                return ffi::SQLITE_OK;
            };
            if st.limit <= 0 || st.failed {
                return ffi::SQLITE_OK;
            }
            if st.map.is_none() {
                acquire(f, st);
                match file_size(f) {
                    Some(size) => st.size = size,
                    None => st.map = None,
                }
            }
            let Some(map) = &st.map else {
                return ffi::SQLITE_OK;
            };
            let end = off
                .saturating_add(i64::from(amt))
                .saturating_add(EOF_MARGIN);
            let within = st.size.min(st.limit).min(map.len as i64);
            if off >= 0 && amt > 0 && end <= within {
                *pp = map.base.add(off as usize).cast();
                st.out += 1;
            }
            ffi::SQLITE_OK
        }
    }

    unsafe extern "C" fn x_unfetch(
        f: *mut ffi::sqlite3_file,
        _off: ffi::sqlite3_int64,
        p: *mut c_void,
    ) -> c_int {
        // SAFETY: an open file of this VFS.
        unsafe {
            let Some(st) = state(f) else {
                return ffi::SQLITE_OK;
            };
            if !p.is_null() {
                st.out = st.out.saturating_sub(1);
            } else if st.map.is_some() {
                // SQLite would unmap here: the file may have changed size.
                match file_size(f) {
                    Some(size) => st.size = size,
                    None => st.size = 0,
                }
            }
            ffi::SQLITE_OK
        }
    }

    unsafe extern "C" fn x_file_control(
        f: *mut ffi::sqlite3_file,
        op: c_int,
        arg: *mut c_void,
    ) -> c_int {
        // SAFETY: an open file of this VFS; for SQLITE_FCNTL_MMAP_SIZE,
        // SQLite passes an i64.
        unsafe {
            if op == ffi::SQLITE_FCNTL_MMAP_SIZE
                && let Some(st) = state(f)
            {
                // Kept here, not passed on: the wrapped file never maps.
                let arg = arg.cast::<i64>();
                let new = *arg;
                *arg = st.limit;
                if new >= 0 && new != st.limit && st.out == 0 {
                    st.limit = new.min(MAX_MAP);
                    if st.map.as_ref().is_some_and(|m| (m.len as i64) < st.limit) {
                        st.map = None;
                    }
                    st.failed = false;
                }
                return ffi::SQLITE_OK;
            }
            match methods(f).xFileControl {
                Some(fc) => fc(inner(f), op, arg),
                None => ffi::SQLITE_NOTFOUND,
            }
        }
    }

    unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
        // SAFETY: an open file of this VFS.
        unsafe {
            let rc = match methods(f).xTruncate {
                Some(t) => t(inner(f), size),
                None => ffi::SQLITE_IOERR_TRUNCATE,
            };
            if let Some(st) = state(f) {
                st.size = st.size.min(size);
            }
            rc
        }
    }

    // Plain forwarding to the wrapped file.
    macro_rules! forward {
        ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $missing:expr) => {
            unsafe extern "C" fn $name(f: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
                // SAFETY: an open file of this VFS; the arguments are
                // SQLite's, passed on unchanged.
                unsafe {
                    match methods(f).$field {
                        Some(g) => g(inner(f) $(, $arg)*),
                        None => $missing,
                    }
                }
            }
        };
    }
    forward!(x_read, xRead, (buf: *mut c_void, amt: c_int, off: ffi::sqlite3_int64) -> c_int, ffi::SQLITE_IOERR_READ);
    forward!(x_write, xWrite, (buf: *const c_void, amt: c_int, off: ffi::sqlite3_int64) -> c_int, ffi::SQLITE_IOERR_WRITE);
    forward!(x_sync, xSync, (flags: c_int) -> c_int, ffi::SQLITE_IOERR_FSYNC);
    forward!(x_file_size, xFileSize, (size: *mut ffi::sqlite3_int64) -> c_int, ffi::SQLITE_IOERR_FSTAT);
    forward!(x_lock, xLock, (lock: c_int) -> c_int, ffi::SQLITE_IOERR_LOCK);
    forward!(x_unlock, xUnlock, (lock: c_int) -> c_int, ffi::SQLITE_IOERR_UNLOCK);
    forward!(x_check_reserved_lock, xCheckReservedLock, (out: *mut c_int) -> c_int, ffi::SQLITE_IOERR_CHECKRESERVEDLOCK);
    forward!(x_sector_size, xSectorSize, () -> c_int, 4096);
    forward!(x_device_characteristics, xDeviceCharacteristics, () -> c_int, 0);
    forward!(x_shm_map, xShmMap, (page: c_int, size: c_int, extend: c_int, pp: *mut *mut c_void) -> c_int, ffi::SQLITE_IOERR_SHMMAP);
    forward!(x_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int) -> c_int, ffi::SQLITE_IOERR_SHMLOCK);
    forward!(x_shm_barrier, xShmBarrier, () -> (), ());
    forward!(x_shm_unmap, xShmUnmap, (delete: c_int) -> c_int, ffi::SQLITE_OK);

    // The VFS's own calls go to the wrapped VFS.
    macro_rules! forward_vfs {
        ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $missing:expr) => {
            unsafe extern "C" fn $name(vfs: *mut ffi::sqlite3_vfs $(, $arg: $ty)*) -> $ret {
                // SAFETY: this VFS; the arguments are SQLite's, passed on
                // unchanged to the wrapped VFS.
                unsafe {
                    let u = unix(vfs);
                    match (*u).$field {
                        Some(g) => g(u $(, $arg)*),
                        None => $missing,
                    }
                }
            }
        };
    }
    forward_vfs!(x_delete, xDelete, (name: *const c_char, sync: c_int) -> c_int, ffi::SQLITE_IOERR_DELETE);
    forward_vfs!(x_access, xAccess, (name: *const c_char, flags: c_int, out: *mut c_int) -> c_int, ffi::SQLITE_IOERR_ACCESS);
    forward_vfs!(x_full_pathname, xFullPathname, (name: *const c_char, n: c_int, out: *mut c_char) -> c_int, ffi::SQLITE_CANTOPEN);
    forward_vfs!(x_dl_open, xDlOpen, (name: *const c_char) -> *mut c_void, ptr::null_mut());
    forward_vfs!(x_dl_error, xDlError, (n: c_int, out: *mut c_char) -> (), ());
    forward_vfs!(x_dl_sym, xDlSym, (h: *mut c_void, sym: *const c_char) -> Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>, None);
    forward_vfs!(x_dl_close, xDlClose, (h: *mut c_void) -> (), ());
    forward_vfs!(x_randomness, xRandomness, (n: c_int, out: *mut c_char) -> c_int, 0);
    forward_vfs!(x_sleep, xSleep, (us: c_int) -> c_int, 0);
    forward_vfs!(x_current_time, xCurrentTime, (out: *mut f64) -> c_int, ffi::SQLITE_ERROR);
    forward_vfs!(x_get_last_error, xGetLastError, (n: c_int, out: *mut c_char) -> c_int, 0);
    forward_vfs!(x_current_time_int64, xCurrentTimeInt64, (out: *mut ffi::sqlite3_int64) -> c_int, ffi::SQLITE_ERROR);
    forward_vfs!(x_set_system_call, xSetSystemCall, (name: *const c_char, call: ffi::sqlite3_syscall_ptr) -> c_int, ffi::SQLITE_NOTFOUND);
    forward_vfs!(x_get_system_call, xGetSystemCall, (name: *const c_char) -> ffi::sqlite3_syscall_ptr, None);
    forward_vfs!(x_next_system_call, xNextSystemCall, (name: *const c_char) -> *const c_char, ptr::null());
}
