//! libc's own socket calls, found once with `dlsym(RTLD_NEXT)`: the ones
//! this library's calls of the same names stand in front of.

use libc::{c_int, c_ulong, c_void, epoll_event, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::OnceLock;

/// The next definition of `name` (a NUL-terminated name) after this
/// library's; the process cannot go on without it.
fn next(name: &'static [u8]) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated (every caller passes a literal
    // ending in \0); RTLD_NEXT is valid in a shared object.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if p.is_null() {
        // No libc to pass to: nothing this process does with sockets works.
        let msg = b"tickwire accel: libc has no socket call of that name; stopping\n";
        // SAFETY: a valid buffer and length; a raw system call, no libc.
        unsafe { libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
        std::process::abort();
    }
    p
}

macro_rules! calls {
    ($($f:ident: $t:ty,)*) => {
        /// The calls, as libc has them.
        pub(crate) struct Libc {
            $(pub $f: $t,)*
        }

        fn find_all() -> Libc {
            Libc {
                $($f: {
                    let p = next(concat!(stringify!($f), "\0").as_bytes());
                    // SAFETY: the symbol is libc's function of that name,
                    // whose C type is the field's (glibc's prototypes).
                    unsafe { std::mem::transmute::<*mut c_void, $t>(p) }
                },)*
            }
        }
    };
}

calls! {
    socket: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int,
    bind: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    connect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    sendto: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t,
    sendmsg: unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t,
    write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t,
    recvfrom: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t,
    recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t,
    read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t,
    close: unsafe extern "C" fn(c_int) -> c_int,
    dup: unsafe extern "C" fn(c_int) -> c_int,
    dup2: unsafe extern "C" fn(c_int, c_int) -> c_int,
    dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int,
    // Variadic in libc; called with one integer or pointer argument.
    fcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int,
    ioctl: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int,
    setsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int,
    poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int,
    epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int,
    epoll_wait: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int) -> c_int,
    epoll_pwait: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int,
    recvmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int, *mut libc::timespec) -> c_int,
    sendmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int) -> c_int,
    readv: unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t,
    writev: unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t,
    ppoll: unsafe extern "C" fn(*mut pollfd, nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int,
    select: unsafe extern "C" fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int,
    pselect: unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *const libc::timespec,
        *const libc::sigset_t,
    ) -> c_int,
}

static LIBC: OnceLock<Libc> = OnceLock::new();

/// libc's calls.
pub(crate) fn libc() -> &'static Libc {
    LIBC.get_or_init(find_all)
}
