"""Isolation of the candidate process, before any untrusted code runs (runs in it only).

Read as source by :mod:`mrgrpo.rewards.sandbox.child` and executed as the module
``_mrgrpo_sandbox.confine`` of each sandbox interpreter. :func:`confine` applies the strongest
layers this system allows and returns their names (``Result.isolation``):

* ``userns`` (not real root): a new user namespace mapping the caller's uid and gid to
  themselves, so the namespaces below need no privilege; every capability is dropped once
  the private root is built.
* ``netns``, ``mountns``, ``ipcns``: no network, a private mount table, an IPC namespace that is
  not the host's; ``pidns``: a private process tree (the program is process 1 of it: no other
  process can be named, so none can be signalled, traced, probed or timed). Started by the
  launcher's candidate launcher (:func:`~.boot._candidate_launcher`), the candidate is already in
  that launcher's network and IPC namespaces (and, not real root, its user namespace), process 1
  of a fresh PID namespace, and under its prepared root (:func:`prepare_root`): it makes only its own mount
  namespace and tmpfs (:func:`_launcher_namespaces`); what it shares with other candidates holds
  nothing it can reach through the seccomp filter, which such a candidate never runs without.
  Otherwise it makes them all here, and the process that created the PID namespace stays
  outside as a *relay* that only waits and exits as its child did.
* ``chroot``: the candidate launcher's read-only root (a copy of the standard library in
  memory, without tests, tools and ``site-packages``: :func:`copy_stdlib`; ``/dev/null``,
  ``/dev/zero``, ``/dev/urandom``) with a size-capped
  tmpfs of the run's own on ``/tmp`` holding the working directory ``/tmp/work``; or, for a
  candidate making its own namespaces, a fresh root with the same content on a size-capped
  tmpfs mounted over the (private view of the) working directory, the standard library there a
  copy of the launcher's image on a read-only tmpfs of its own (:func:`_image_into`); only a
  candidate started without the launcher (a new interpreter) gets a read-only bind of the
  host's (``site-packages`` hidden).
* ``jail`` (no namespaces, uid 0: real root, or uid 0 of a user namespace that may make none): a
  ``chroot`` into the run's directory, holding ``/tmp/work`` and the three devices where they
  can be made (:func:`_jail`); the standard library read from the launcher's image by its fd
  (:class:`_ImageFinder`), so no host path exists for the program. Not a private root: the
  network, IPC and process tree stay the host's.
* ``uid`` (real root, with or without the namespaces; uid 0 of a user namespace that may make
  none, where another uid is mapped in it): a drop to a fresh per-run uid and gid (or a mapped
  one), no groups, no capability in any set (:func:`_drop_root`).
* ``nocaps`` (uid 0 kept: a user namespace mapping only uid 0 that may make no namespaces of
  its own, as a rootless container under a seccomp profile refusing them; or a system refusing
  the uid change): no capability in any set, bounding set emptied, securebits locked.

Every candidate is checked before it runs (:func:`_capabilities_gone`): one that still holds a
capability, or is uid 0 where execve could give some back, exits (status 71) instead.
* ``landlock`` (where the kernel has it): reading only the standard library (without a private
  root, none of the host's files: the launcher's image in memory, :func:`stdlib_image`) and the devices,
  writing only the working directory, no TCP, no signals or abstract sockets outside.
* ``seccomp``: a filter refusing ``kill``/``tkill``/``tgkill``/``rt_*sigqueueinfo`` towards any
  other process, ``pidfd_*``, ``ptrace``, ``process_vm_*``, ``socket``, ``socketpair``,
  ``pipe``/``pipe2`` (a candidate uses the fds it was given), every call giving a socket an address or reaching one by address
  (``bind``, ``connect``, ``listen``, ``accept``, ``sendto``, ``sendmsg``), namespaces, mounts, new processes and threads, ``execve``, ``io_uring``,
  ``bpf``, SysV IPC and POSIX message queues, and calls that reach other processes' scheduling, limits or memory;
  ``openat`` that may write relative to a directory fd, ``openat2``, ``mknod``/``mknodat``,
  ``memfd_create``, socket buffer sizes (``setsockopt`` ``SO_SNDBUF``/``SO_RCVBUF``); the calls
  that only serve to set or read state other runs share (page-cache advice and probes, file
  events, file locks, shared futexes: see the comment on the filter's tables).

Each layer is tried independently: a system that refuses namespaces (Docker's default seccomp
profile) still gets Landlock and seccomp. ``job["refuse"]`` names layers not to try (tests
simulate restricted systems with it).
"""

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18,
)
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_PRIVATE_WORKDIR = "/tmp/work"
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 1, 4, 38, 22
_PR_SET_SECUREBITS, _PR_GET_SECUREBITS, _PR_CAPBSET_READ, _PR_CAPBSET_DROP = 28, 27, 23, 24
_PR_GET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 39, 47, 4
# SECBIT_NOROOT (+ locked), SECBIT_NO_SETUID_FIXUP_LOCKED (the fixup stays on: leaving uid 0
# clears every capability), SECBIT_KEEP_CAPS_LOCKED, SECBIT_NO_CAP_AMBIENT_RAISE (+ locked): uid 0
# (of a user namespace or not) regains no capability by execve, keeps none across setuid, raises
# no ambient ones
_SECUREBITS = 0x01 | 0x02 | 0x08 | 0x20 | 0x40 | 0x80

#: True in the candidate launcher and the candidates it forks (:func:`~.boot._candidate_launcher`
#: sets it): a candidate forked there is already in the launcher's network and IPC namespaces and
#: under its prepared root (:func:`prepare_root`), with its capabilities; not real root, it is
#: also in the launcher's user namespace and process 1 of a PID namespace made for it alone.
#: Such a candidate never runs without the seccomp filter (:func:`confine`), which is what keeps
#: the namespaces it shares with other candidates empty of anything they could meet in.
IN_LAUNCHER = False
#: In the candidate launcher: whether it is real root (then it made no user namespace).
LAUNCHER_REAL_ROOT = False
#: Where each candidate of the candidate launcher gets its own size-capped tmpfs.
_LAUNCHER_TMP = "/tmp"


_CTYPES = []


def _c():
    """``(ctypes, libc, syscall)`` through ctypes (errno kept). Made once, in the launcher, before
    it forks anything (:func:`warm`): a candidate's setup then creates no ctypes type and opens no
    library, and none of this is reached by untrusted code before it is used."""
    if not _CTYPES:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long

        class Fprog(ctypes.Structure):  # struct sock_fprog
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        # capget/capset's header and data. Kept: ctypes caches an array type only through a weak
        # reference, so ``c_uint32 * 2`` written in place made a new class in every candidate
        # (about 0.1 ms of its CPU, measured), the launcher's copy long collected.
        _CTYPES[:] = [ctypes, libc, syscall, Fprog, ctypes.c_uint32 * 2, ctypes.c_uint32 * 6]
    return tuple(_CTYPES[:3])


def _capability_arrays(fill):
    """``(header, data)`` for ``capget``/``capset`` of this thread, every data word ``fill``."""
    _c()
    return _CTYPES[4](0x20080522, 0), _CTYPES[5](*([fill] * 6))  # _LINUX_CAPABILITY_VERSION_3


def warm():
    """In the launcher: the ctypes objects and C functions a candidate's setup uses, resolved once,
    and the seccomp filter's program (:func:`seccomp_program`)."""
    import posix

    for private_root, makes_files in ((True, True), (False, False)):  # the candidate launcher's; without a private root
        seccomp_program(posix.uname().machine, 1, private_root, makes_files)
    _, libc, _ = _c()
    for name in ("prctl", "unshare", "mount", "umount2", "chroot", "capget", "capset", "setns", "setgroups", "mlock"):
        getattr(libc, name)


def lock_mapped_files():
    """In the launcher, once its modules are loaded (again after it loads more): every page of
    every file it maps (the interpreter, ``libpython``, the C library, the extension modules and
    the libraries they need) kept in memory, so a touch costs the same in every run. Every
    candidate is a fork of it and touches pages of those files (with a private root, ctypes can
    read any mapped page): a page that no process had read would be read from the disk when one
    run touched it and be cached for the next, which could tell by timing a touch (a major fault
    costs tens of microseconds or more, a cached page one or two), and eviction (memory pressure,
    proactive reclaim such as DAMON's ``pageout``) makes cold pages again.

    Where this process may lock without limit (real root with ``CAP_IPC_LOCK``, or an unlimited
    ``RLIMIT_MEMLOCK``), each mapping is locked (``mlock``: resident for the launcher's life).
    Elsewhere the limit is usually 8 MB, below the files' mapped size (15 MB here, more once the
    extension modules are loaded), so each read-only mapping (code, constants: most of it) is
    replaced by a mapping of a sealed memfd holding the same bytes (:func:`_copy_into_memory`):
    no longer the file's, its pages are memory no run can warm (only swap could take them out,
    where there is swap); only the mappings that cannot be copied (writable ones,
    whose pages the process changes, shared ones, and any whose copy was refused) spend the
    limit. Returns ``(bytes locked, bytes copied, bytes neither)``."""
    import posix

    ctypes, libc, _ = _c()
    try:
        with open("/proc/self/maps") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return 0, 0, 0
    mappings = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/") or "r" not in fields[1]:
            continue  # anonymous memory, or a guard gap with no pages
        start, end = (int(value, 16) for value in fields[0].split("-"))
        # a private read-only mapping of a regular file may be copied (not a memfd's or a
        # device's), if no page of it lies past the file's end (reading one would be SIGBUS)
        path = fields[5]
        copyable = (fields[1][1] == "-" and fields[1][3] == "p"
                    and not path.startswith(("/memfd:", "/dev/", "/proc/", "/sys/")) and not path.endswith(" (deleted)"))
        if copyable:
            try:
                copyable = int(fields[2], 16) + (end - start) <= -(-posix.stat(path).st_size // 4096) * 4096
            except (OSError, ValueError):
                copyable = False
        mappings.append((copyable, start, end, fields[1]))
    unlimited = _lock_unlimited()
    locked = copied = neither = 0
    for copyable, start, end, mode in mappings:
        prot = (1 if "r" in mode else 0) | (4 if "x" in mode else 0)
        if copyable and not unlimited and _copy_into_memory(ctypes, libc, start, end - start, prot):
            copied += end - start
        elif libc.mlock(ctypes.c_void_p(start), ctypes.c_size_t(end - start)) == 0:
            locked += end - start
        else:
            neither += end - start
    return locked, copied, neither


def _lock_unlimited():
    """Whether ``mlock`` is unbounded here: an unlimited ``RLIMIT_MEMLOCK``, or ``CAP_IPC_LOCK``
    held by root of the initial user namespace (a user namespace's own root holds it only for
    that namespace, which ``mlock`` does not count)."""
    import resource

    if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] == resource.RLIM_INFINITY:
        return True
    if not _real_root():
        return False
    _, libc, _ = _c()
    header, data = _capability_arrays(0)
    return libc.capget(header, data) == 0 and bool(data[0] >> 14 & 1)  # the effective set's CAP_IPC_LOCK


def _copy_into_memory(ctypes, libc, start, size, prot):
    """Replace the read-only mapping at ``start`` (``size`` bytes) by a mapping, at the same address
    and with protection ``prot``, of a sealed memfd holding the same bytes: one ``mmap`` with
    ``MAP_FIXED`` swaps them, so code running from the range (this very call's, in the C library)
    goes on in identical bytes. Shared, it costs a fork no page-table copy (a private anonymous
    copy would: 10% more per run as uid 65534, measured); sealed against writing, no process can
    make it writable (``mprotect`` refuses), so none changes what the others run. False where
    any step is refused (then nothing changed: a system refusing executable memfds, for one)."""
    import posix

    try:
        fd = _sealed_memfd("mrgrpo-mapped", ctypes.string_at(start, size), executable=True)
    except (AttributeError, OSError):
        return False
    try:
        mmap = libc["mmap"]
        mmap.restype = ctypes.c_void_p
        mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        return mmap(start, size, prot, 0x01 | 0x10, fd, 0) == start  # MAP_SHARED | MAP_FIXED
    except OSError:
        return False
    finally:
        posix.close(fd)


def _sealed_memfd(name, data, executable=False):
    """A new memfd (close-on-exec) holding ``data``, sealed against any change (``F_SEAL_SEAL``,
    ``SHRINK``, ``GROW``, ``WRITE``): no process, candidate or not, changes it or maps it
    writable. ``executable``: asked for as such (``MFD_EXEC``, Linux >= 6.3), where the kernel
    knows the flag. Raises OSError."""
    import fcntl
    import posix

    flags = posix.MFD_CLOEXEC | posix.MFD_ALLOW_SEALING
    try:
        fd = posix.memfd_create(name, flags | (0x10 if executable else 0))
    except OSError:
        if not executable:
            raise
        fd = posix.memfd_create(name, flags)  # a kernel without MFD_EXEC: executable by default
    try:
        view, done = memoryview(data), 0
        while done < len(data):
            done += posix.write(fd, view[done:])
        fcntl.fcntl(fd, 1033, 1 | 2 | 4 | 8)  # F_ADD_SEALS: SEAL | SHRINK | GROW | WRITE
    except BaseException:
        posix.close(fd)
        raise
    return fd


def _real_root():
    """Root of the initial user namespace (then namespaces need no user namespace of their own)."""
    import posix

    if posix.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as handle:
            return handle.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def _write(path, text):
    import posix

    fd = posix.open(path, posix.O_WRONLY)
    try:
        posix.write(fd, text.encode())
    finally:
        posix.close(fd)


def _namespaces(job, layers):
    """Unshare the namespaces (then fork: the child is process 1 of the new PID namespace and
    returns; the parent relays its exit and never returns). Raises OSError when refused."""
    import posix

    _, libc, _ = _c()
    real_root = _real_root()
    uid, gid = posix.geteuid(), posix.getegid()
    # A PID namespace in every case: without root the program shares the caller's uid, and its
    # own process tree is what keeps the caller out of its reach; as root (a fresh uid of its own)
    # it still could name, probe and time every other process of the host without one.
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID | (0 if real_root else _CLONE_NEWUSER)
    if libc.unshare(flags) != 0:
        raise OSError("unshare refused")
    if not real_root:
        # /proc/self/*_map of a non-dumpable process belong to root: dumpable while writing them
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", "%d %d 1" % (uid, uid))
            _write("/proc/self/gid_map", "%d %d 1" % (gid, gid))
        finally:
            libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        layers.append("userns")
    layers += ["netns", "mountns", "ipcns"]
    child = posix.fork()
    if child:
        _relay(child)
    libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
    layers.append("pidns")
    return real_root


def _launcher_namespaces(job, layers):
    """A candidate of the candidate launcher: its own mount namespace (a copy of the launcher's
    few mounts) with its own size-capped tmpfs on ``/tmp`` holding its working directory; the
    launcher's network and IPC namespaces (and, not real root, its user namespace), process 1 of a
    fresh PID namespace (checked: never run in one shared with any other process). Returns
    the working directory. Any failure ends the process (status 71): the launcher checked at its
    start that a candidate can do all this."""
    import posix

    _, libc, _ = _c()
    if posix.getpid() != 1:
        posix._exit(71)
    if not LAUNCHER_REAL_ROOT:
        layers.append("userns")
    if libc.unshare(_CLONE_NEWNS) != 0:
        posix._exit(71)
    options = b"size=%dk,nr_inodes=%d,mode=1777" % (job["tmpfs_kb"], job.get("tmpfs_inodes", 16384))
    if libc.mount(b"tmpfs", _LAUNCHER_TMP.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        posix._exit(71)
    workdir = _LAUNCHER_TMP + "/work"
    posix.mkdir(workdir, 0o700)
    if LAUNCHER_REAL_ROOT:
        posix.chown(workdir, job["uid"], job["uid"])
    layers += ["netns", "mountns", "ipcns", "pidns", "chroot"]
    return workdir


def prepare_root(stdlib):
    """In the candidate launcher, once (already in mount, network and IPC namespaces of its own):
    the candidates' root, on a small tmpfs made read-only once built: the standard library
    (a copy in memory: :func:`copy_stdlib`), ``/dev/null``, ``/dev/zero``, ``/dev/urandom``,
    and an empty ``/tmp`` on which each candidate mounts a tmpfs of its own. The launcher moves
    into it (``pivot_root``, the old root detached, so a candidate's mount namespace copies only
    these few mounts; ``chroot`` where ``pivot_root`` is refused). False where any step fails
    (then the launcher serves no candidate)."""
    import posix

    _, libc, syscall = _c()
    top = None
    for candidate in ("/tmp", "/mnt", "/opt", "/var", "/srv", "/home"):
        try:
            if posix.stat(candidate).st_mode & 0o170000 == 0o040000 and not (
                    stdlib == candidate or stdlib.startswith(candidate + "/")):
                top = candidate
                break
        except OSError:
            continue
    if top is None:
        return False
    try:
        if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            return False
        if libc.mount(b"tmpfs", top.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1024k,mode=755") != 0:
            return False
        _populate({"stdlib": stdlib}, libc, top, False, launcher=True)
        posix.mkdir(top + "/.old", 0o700)
        posix.chdir(top)
        number = {"x86_64": 155, "aarch64": 41}.get(posix.uname().machine)
        if number is not None and syscall(number, b".", b".old") == 0:
            posix.chdir("/")
            if libc.umount2(b"/.old", 2) != 0:  # MNT_DETACH
                return False
            posix.rmdir("/.old")
        else:
            posix.rmdir(".old")
            if libc.chroot(b".") != 0:
                return False
            posix.chdir("/")
        flags = _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
        return libc.mount(None, b"/", None, flags, None) == 0
    except OSError:
        return False


def _relay(child):
    """Outside the PID namespace: hold nothing, wait for the candidate, end as it ended."""
    import posix
    import resource
    import signal

    posix.closerange(0, 1 << 16)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    while True:
        try:
            _, status = posix.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            posix._exit(70)
    if posix.WIFSIGNALED(status):
        sig = posix.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        posix.kill(posix.getpid(), sig)
        posix._exit(128 + sig)
    posix._exit(posix.WEXITSTATUS(status) if posix.WIFEXITED(status) else 70)


def _mount_flags(path):
    """The flags of the mount holding ``path`` that a bind remount must keep (locked in a user namespace)."""
    import posix

    f = posix.statvfs(path).f_flag
    flags = 0
    for bit, flag in ((1, _MS_RDONLY), (2, _MS_NOSUID), (4, _MS_NODEV), (8, _MS_NOEXEC),
                      (1024, _MS_NOATIME), (2048, _MS_NODIRATIME), (4096, _MS_RELATIME)):
        if f & bit:
            flags |= flag
    return flags


def _new_root(job, real_root):
    """A fresh root on a tmpfs mounted over this namespace's view of the working directory;
    chroot into it. Returns the working directory inside it; raises OSError (nothing mounted)."""
    import posix

    _, libc, _ = _c()
    top = job["workdir"]
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError("mount --make-rprivate / failed")
    options = b"size=%dk,nr_inodes=%d,mode=755" % (job["tmpfs_kb"], job.get("tmpfs_inodes", 16384))
    if libc.mount(b"tmpfs", top.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        raise OSError("tmpfs failed")
    try:
        return _populate(job, libc, top, real_root)
    except OSError:
        libc.umount2(top.encode(), 2)  # MNT_DETACH: back to the plain directory
        raise


def _populate(job, libc, root, real_root, launcher=False):
    """The private root's content under ``root``; ``launcher``: the candidate launcher's shared
    root (:func:`prepare_root`): an empty ``/tmp`` (each candidate mounts its own there), no
    working directory, no chroot."""
    import posix

    def makedirs(path, mode=0o755):
        at = ""
        for part in path.strip("/").split("/"):
            at += "/" + part
            try:
                posix.mkdir(at, mode)
            except FileExistsError:
                pass

    def bind(source, target, readonly):
        if libc.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError("bind mount of %s failed" % source)
        if readonly:
            flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _mount_flags(source)
            if libc.mount(None, target.encode(), None, flags, None) != 0:
                raise OSError("read-only remount of %s failed" % source)

    global _ROOT_IMAGE_IN
    stdlib = job["stdlib"]
    hidden = None
    if launcher:  # a copy in memory: no page of it is the host's page cache (copy_stdlib)
        makedirs(root + stdlib)
        copy_stdlib(stdlib, root + stdlib, libc)
    elif IMAGE_PATH is not None and _image_open():
        # forked by the launcher, which holds the image: a copy of it in memory, not the host's
        # files (whose page-cache state one run could set and a later one read)
        makedirs(root + ROOT_IMAGE_DIR)
        _image_into(root + ROOT_IMAGE_DIR, libc)
        _ROOT_IMAGE_IN = True
    else:
        makedirs(root + stdlib)
        bind(stdlib, root + stdlib, readonly=True)
        hidden = root + stdlib + "/site-packages"
    try:
        if hidden:
            posix.stat(hidden)
    except OSError:
        hidden = None
    if hidden and libc.mount(b"tmpfs", hidden.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, b"size=4k,mode=755") != 0:
        raise OSError("hiding site-packages failed")
    makedirs(root + "/dev")
    for device in ("/dev/null", "/dev/zero", "/dev/urandom"):
        posix.close(posix.open(root + device, posix.O_CREAT | posix.O_WRONLY, 0o644))
        bind(device, root + device, readonly=False)
    if launcher:
        makedirs(root + _LAUNCHER_TMP)
        return None
    makedirs(root + "/tmp", 0o1777)
    posix.chmod(root + "/tmp", 0o1777)
    posix.mkdir(root + _PRIVATE_WORKDIR, 0o700)
    if real_root:
        posix.chown(root + _PRIVATE_WORKDIR, job["uid"], job["uid"])
    posix.chdir(root)
    if libc.chroot(b".") != 0:
        raise OSError("chroot failed")
    posix.chdir("/")
    return _PRIVATE_WORKDIR


#: Parts of the standard library that candidates do not import (tests, tools, GUIs, the static
#: library archive in ``config-*``, installed packages): not in the candidates' copy.
_STDLIB_LEFT_OUT = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter", "turtledemo",
                              "ensurepip", "lib2to3", "venv", "__phello__"})


#: Candidates without a private root (namespaces refused) import the standard library from an
#: image in memory, not from the host's files (:func:`stdlib_image`): a sealed memfd holding a zip
#: archive, at this fd number in the launcher and in each such candidate (a description of its own).
IMAGE_FD = 1000
#: ``/proc/self/fd/<IMAGE_FD>`` once the launcher has built the image (None before, or without one).
IMAGE_PATH = None
#: The standard library's path as the launcher's modules name it (the image was made from it).
_IMAGE_SOURCE = None
#: A candidate making a root of its own, forked by a launcher holding the image, gets a copy of
#: the image in that root, on a read-only tmpfs of its own here (:func:`_image_into`).
ROOT_IMAGE_DIR = "/.stdlib"
ROOT_IMAGE = ROOT_IMAGE_DIR + "/stdlib.zip"
#: True in a candidate whose private root holds that copy.
_ROOT_IMAGE_IN = False
#: Extension modules the launcher does not load for such candidates: the guards refuse importing
#: them (a module already loaded raises no import event), or they exist only to test CPython.
_NOT_PRELOADED = frozenset({"readline", "_sqlite3", "_dbm", "_gdbm", "_posixshmem", "_tkinter", "_ctypes_test",
                            "_testbuffer", "_testcapi", "_testclinic", "_testimportmultiple", "_testinternalcapi",
                            "_testmultiphase", "_xxsubinterpreters", "_xxtestfuzz", "xxlimited", "xxlimited_35"})


def stdlib_image(stdlib):
    """The launcher's image of the standard library for candidates without a private root (built
    once, on its first fork of a candidate): every module of ``stdlib`` but what
    :func:`copy_stdlib` leaves out, as its cached bytecode where that matches its source (else
    the source), in a zip archive in a memfd sealed against any change, at fd :data:`IMAGE_FD`;
    and every extension module of ``lib-dynload`` loaded here (a zip cannot hold them), but
    :data:`_NOT_PRELOADED`. Such a candidate then imports from ``/proc/self/fd/<IMAGE_FD>`` and
    may read nothing of the host's library (:func:`_import_from_image`): memfd pages are memory,
    so no read of them changes or reveals whether a page is cached, where reads of the host's
    files let one run leave bits for a later one (docs/sandbox.md). Returns the image's path, or
    None where it cannot be built (the candidates then read the host's files, as before)."""
    global IMAGE_PATH, _IMAGE_SOURCE
    if IMAGE_PATH is not None:
        return IMAGE_PATH
    import importlib
    import io
    import posix
    import sys
    import zipfile
    import zipimport

    tag = sys.implementation.cache_tag
    try:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            todo = [""]
            while todo:
                relative = todo.pop()
                for entry in posix.scandir(stdlib + relative):
                    name = relative + "/" + entry.name
                    if entry.name in _STDLIB_LEFT_OUT or (not relative and (
                            entry.name.startswith("config-") or entry.name == "lib-dynload")):
                        continue
                    if entry.is_dir() and entry.name != "__pycache__":
                        todo.append(name)
                    elif entry.is_file() and entry.name.endswith(".py"):
                        archive.writestr(*_image_entry(stdlib, name, entry.stat(), tag))
        data = buffer.getvalue()
        del buffer
        fd = _sealed_memfd("mrgrpo-stdlib", data)
        try:
            posix.dup2(fd, IMAGE_FD)
        finally:
            posix.close(fd)
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    IMAGE_PATH, _IMAGE_SOURCE = "/proc/self/fd/%d" % IMAGE_FD, stdlib
    _IMAGE_MODULES.update(_image_modules(data))
    del data
    zipimport.zipimporter(IMAGE_PATH)  # its table of contents read here, once: every candidate inherits it
    # the same table for the copy a candidate making its own root puts at ROOT_IMAGE (_image_into),
    # each entry's path moved there: made once here, not in each such candidate
    cache, cut = zipimport._zip_directory_cache, len(IMAGE_PATH)
    entries = cache.get(IMAGE_PATH)
    if entries is not None:
        cache[ROOT_IMAGE] = {name: (ROOT_IMAGE + entry[0][cut:],) + entry[1:] for name, entry in entries.items()}
    try:
        names = sorted(e.name.split(".")[0] for e in posix.scandir(stdlib + "/lib-dynload") if e.name.endswith(".so"))
    except OSError:
        names = []
    for name in names:
        if name not in _NOT_PRELOADED and name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:
                pass
    return IMAGE_PATH


#: Module name -> ``(name in the image, offset of its bytes, size, is a package, is bytecode)``
#: of every module in the launcher's image (:func:`stdlib_image`), for :class:`_ImageFinder`.
_IMAGE_MODULES = {}


def _image_modules(data):
    """:data:`_IMAGE_MODULES`'s entries for the zip archive ``data`` (stored, not compressed):
    where each member's bytes start, read from its local header."""
    import io
    import struct
    import zipfile

    modules = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            header = info.header_offset
            name_size, extra_size = struct.unpack_from("<HH", data, header + 26)
            start = header + 30 + name_size + extra_size
            path, _, kind = info.filename.rpartition(".")
            package = path == "__init__" or path.endswith("/__init__")
            name = path[: -len("__init__")].rstrip("/") if package else path
            if name and kind in ("py", "pyc"):
                modules[name.replace("/", ".")] = (info.filename, start, info.file_size, package, kind == "pyc")
    return modules


class _ImageFinder:
    """Imports the standard library from the image's fd (:data:`IMAGE_FD`) by ``pread``, no path
    opened: a candidate without a private root may be under a root with no ``/proc`` (``jail``),
    and needs no path of the host's at all. A finder and loader on ``sys.meta_path``, answering
    by module name for every module of the image; ``__file__`` names the module inside
    :data:`IMAGE_PATH`, as the zip importer would."""

    def find_spec(self, fullname, path=None, target=None):
        import importlib.machinery

        entry = _IMAGE_MODULES.get(fullname)
        if entry is None:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=IMAGE_PATH + "/" + entry[0],
                                              is_package=entry[3])
        if entry[3]:
            spec.submodule_search_locations = [IMAGE_PATH + "/" + entry[0].rpartition("/")[0]]
        spec.has_location = True
        return spec

    def create_module(self, spec):
        return None

    def _bytes(self, fullname):
        import posix

        name, start, size, _, _ = _IMAGE_MODULES[fullname]
        data = b""
        while len(data) < size:
            chunk = posix.pread(IMAGE_FD, size - len(data), start + len(data))
            if not chunk:
                raise ImportError("the image ends inside %s" % name, name=fullname)
            data += chunk
        return data

    def get_code(self, fullname):
        import marshal

        data = self._bytes(fullname)
        if _IMAGE_MODULES[fullname][4]:
            return marshal.loads(memoryview(data)[16:])  # after the .pyc header
        return compile(data, IMAGE_PATH + "/" + _IMAGE_MODULES[fullname][0], "exec", dont_inherit=True)

    def exec_module(self, module):
        exec(self.get_code(module.__spec__.name), module.__dict__)

    def get_source(self, fullname):
        entry = _IMAGE_MODULES.get(fullname)
        if entry is None or entry[4]:
            return None
        import importlib.util

        return importlib.util.decode_source(self._bytes(fullname))

    def is_package(self, fullname):
        return _IMAGE_MODULES[fullname][3]

    def get_filename(self, fullname):
        return IMAGE_PATH + "/" + _IMAGE_MODULES[fullname][0]

    def invalidate_caches(self):
        pass


def _image_entry(stdlib, name, info, tag):
    """``(name in the archive, bytes)`` of module source ``name`` (relative to ``stdlib``): its
    cached bytecode, sourceless, where the cache's header matches the source's modification time
    and size (what the interpreter itself checks), else the source."""
    import posix

    folder, _, base = name.rpartition("/")
    cached = "%s%s/__pycache__/%s.%s.pyc" % (stdlib, folder, base[:-3], tag)
    try:
        with open(cached, "rb") as handle:
            code = handle.read()
        flags = int.from_bytes(code[4:8], "little")
        fresh = (flags & 1 or (int.from_bytes(code[8:12], "little") == int(info.st_mtime) & 0xFFFFFFFF
                               and int.from_bytes(code[12:16], "little") == info.st_size & 0xFFFFFFFF))
        if len(code) > 16 and fresh:
            return name[1:-3] + ".pyc", code
    except OSError:
        pass
    fd = posix.open(stdlib + name, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        source = b""
        while True:
            chunk = posix.read(fd, 1 << 20)
            if not chunk:
                break
            source += chunk
    finally:
        posix.close(fd)
    return name[1:], source


def _image_into(directory, libc):
    """A copy of the launcher's image (:data:`IMAGE_FD`) as :data:`ROOT_IMAGE`'s file under
    ``directory`` of a private root being built: a tmpfs of its own, just large enough (not the
    run's), read-only once written. tmpfs pages are memory: reading them neither changes nor
    reveals any page-cache state. Raises OSError (the root is then not made)."""
    import posix

    size = posix.fstat(IMAGE_FD).st_size
    options = b"size=%dk,nr_inodes=4,mode=755" % ((size >> 10) + 64)
    if libc.mount(b"tmpfs", directory.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        raise OSError("tmpfs for the image failed")
    target = directory + ROOT_IMAGE[len(ROOT_IMAGE_DIR):]
    out = posix.open(target, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o444)
    try:
        if _send_all(out, IMAGE_FD, size) != size:
            raise OSError("copying the image failed")
    finally:
        posix.close(out)
    flags = _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    if libc.mount(None, directory.encode(), None, flags, None) != 0:
        raise OSError("read-only remount of the image failed")


def _import_from_image(stdlib, image=None):
    """This candidate imports only from the launcher's image (:func:`stdlib_image`), at ``image``
    (its own fd's path by default; in a private root, the copy there, whose table of contents the
    launcher made too): the import path is the image alone and every loaded package's search
    path moves into it (its extension modules are already loaded), so nothing of the host's
    library needs reading."""
    import sys

    image = image or IMAGE_PATH

    def moved(entry):
        for library in (stdlib, _IMAGE_SOURCE):  # the caller's real path, and the launcher's own
            if type(entry) is str and library and (entry == library or entry.startswith(library + "/")):
                rest = entry[len(library):]
                return None if rest == "/lib-dynload" or rest.startswith("/lib-dynload/") else image + rest
        return None  # nothing outside the library is importable without a private root

    sys.path[:] = [image]
    for module in list(sys.modules.values()):
        # the module's own dict, not getattr: a lazy module's __getattr__ would import on lookup
        search = getattr(module, "__dict__", {}).get("__path__")
        if type(search) is list:
            search[:] = [m for m in (moved(p) for p in search) if m]
    sys.path_importer_cache.clear()
    if image == IMAGE_PATH and _IMAGE_MODULES:  # the fd itself, before any path-based finder
        sys.meta_path.insert(next((i for i, f in enumerate(sys.meta_path) if getattr(f, "__name__", "") == "PathFinder"),
                                  len(sys.meta_path)), _ImageFinder())


def copy_stdlib(source, target, libc, size_mb=512):
    """The candidates' standard library (candidate launcher, once): a copy of ``source``, without
    :data:`_STDLIB_LEFT_OUT` and ``config-*``, on a tmpfs of its own at ``target`` (``size_mb`` at
    most), read-only once copied. tmpfs pages are memory (they leave it only for swap, where there is
    swap), so no candidate's read changes or reveals whether a page is cached, as reads of the
    host's files did (a page no process had read was cached after a run read it, and a later run
    could time that). Modes and modification times are kept (a module's cached bytecode is
    checked against its source's). Walks iteratively; symbolic links stay links. Returns the
    number of bytes copied; raises OSError (the launcher then serves no candidate)."""
    import posix

    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=%dm,mode=755" % size_mb) != 0:
        raise OSError("tmpfs for the standard library failed")
    copied, todo = 0, [""]
    while todo:
        relative = todo.pop()
        for entry in posix.scandir(source + relative):
            name = relative + "/" + entry.name
            if not relative and (entry.name in _STDLIB_LEFT_OUT or entry.name.startswith("config-")):
                continue
            if entry.name in _STDLIB_LEFT_OUT and entry.is_dir(follow_symlinks=False):
                continue
            info = entry.stat(follow_symlinks=False)
            if entry.is_symlink():
                posix.symlink(posix.readlink(source + name), target + name)
                continue
            if entry.is_dir():
                posix.mkdir(target + name, 0o755)
                todo.append(name)
            elif entry.is_file():
                copied += _copy_file(source + name, target + name, info.st_size)
            else:
                continue
            posix.chmod(target + name, info.st_mode & 0o7777)
            posix.utime(target + name, ns=(info.st_atime_ns, info.st_mtime_ns))
    flags = _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    if libc.mount(None, target.encode(), None, flags, None) != 0:
        raise OSError("read-only remount of the standard library failed")
    return copied


def _copy_file(source, target, size):
    import posix

    src = posix.open(source, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        dst = posix.open(target, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o600)
        try:
            return _send_all(dst, src, size)
        finally:
            posix.close(dst)
    finally:
        posix.close(src)


def _send_all(dst, src, size):
    """Copy ``size`` bytes of fd ``src`` (from its start) to fd ``dst`` in the kernel; the bytes
    copied (fewer where ``src`` ends first)."""
    import posix

    done = 0
    while done < size:
        sent = posix.sendfile(dst, src, done, size - done)
        if sent <= 0:
            break
        done += sent
    return done


def _mapped_ids(preferred):
    """uid 0 of a user namespace that is not the sandbox's own: ``(uid, gid)`` of another id
    mapped in it (``preferred``, the run's fresh uid, where mapped, else one picked from it in
    the largest range that does not hold 0), or None where only 0 is mapped (``unshare -U -r``).
    Read before Landlock (which would refuse ``/proc``)."""

    def pick(path):
        try:
            with open(path) as handle:
                ranges = [tuple(int(w) for w in line.split()) for line in handle if line.strip()]
        except (OSError, ValueError):
            return None
        spans = []
        for inside, _, count in ranges:
            low = max(inside, 1)  # never 0
            if inside + count > low:
                spans.append((low, inside + count))
        for low, high in spans:
            if low <= preferred < high:
                return preferred
        if not spans:
            return None
        low, high = max(spans, key=lambda span: span[1] - span[0])
        return low + preferred % (high - low)

    uid, gid = pick("/proc/self/uid_map"), pick("/proc/self/gid_map")
    return None if uid is None or gid is None else (uid, gid)


def _setgroups_denied():
    """True where this user namespace forbids ``setgroups`` (its groups are then fixed for all)."""
    try:
        with open("/proc/self/setgroups") as handle:
            return handle.read().strip() == "deny"
    except OSError:
        return False


#: The bounding set is empty already: the candidate launcher, as real root, empties its own
#: once (:func:`drop_bounding_set`; its effective and permitted sets stay), and every process it
#: forks inherits it.
BOUNDING_SET_EMPTY = False


def drop_bounding_set():
    """Empty this process's capability bounding set (what execve may grant); True if it is."""
    _, libc, _ = _c()
    cap = 0
    while cap < 64 and libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1  # until EINVAL past the last capability (EPERM without CAP_SETPCAP: setuid clears them)
    return cap > 0 and all(libc.prctl(_PR_CAPBSET_READ, c, 0, 0, 0) == 0 for c in range(cap))


def _drop_root(ids, workdir, stdlib, private, groups_fixed=False):
    """uid 0 (real root with or without namespaces, or uid 0 of a user namespace that may make
    none): every capability gone, the bounding set emptied and securebits locked first (as uid
    0, with its capabilities), so neither execve nor setuid can give any back; then, where
    ``ids`` names a ``(uid, gid)``, a drop to them with no supplementary group. Without a
    private root the run's directory is made that uid's, and the standard library is reached
    through an fd where the uid could not reach its path (:func:`_reach_stdlib`).
    ``groups_fixed``: ``setgroups`` is refused to everyone here (a user namespace whose
    ``setgroups`` is ``deny``), so the groups stay as they are.

    Returns the layer: ``uid`` (the uid changed) or ``nocaps`` (uid 0 kept: no other uid is
    mapped, or the system refused the change); the caller checks that no capability remains."""
    import posix

    _, libc, _ = _c()
    owner = None
    if ids is not None and not private:
        try:
            st = posix.stat(workdir)
            owner = (st.st_uid, st.st_gid)
            posix.chown(workdir, ids[0], ids[1])
            _reach_stdlib(stdlib)
        except OSError:
            ids = None
    if not BOUNDING_SET_EMPTY:
        drop_bounding_set()
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0)  # checked with the rest (_capabilities_gone)
    changed, own_gid = False, posix.getgid()
    parent = posix.getppid()  # alive: its death signal, armed until the uid changes, would have ended us
    if ids is not None:
        uid, gid = ids
        try:
            if not groups_fixed:
                posix.setgroups([])
            posix.setgid(gid)
            posix.setuid(uid)
            changed = True
            # the credential change cleared the death signal: armed again, and a parent that died
            # in between is seen (else a candidate would outlive the launcher that forked it)
            libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
            if posix.getppid() != parent:
                posix._exit(70)
        except OSError:
            if posix.getuid() != 0 or posix.geteuid() != 0:
                posix._exit(71)  # half-changed: never reached (the uid change is one call)
            try:  # uid 0 kept: the directory and gid back as they were, while CAP_CHOWN/SETGID last
                posix.setgid(own_gid)
                if owner:
                    posix.chown(workdir, owner[0], owner[1])
            except OSError:
                pass
        if changed and (posix.getresuid() != (uid, uid, uid) or posix.getresgid() != (gid, gid, gid)):
            posix._exit(71)
    _drop_capabilities(user_namespace=False)  # where the uid changed: already none, setuid cleared them
    return "uid" if changed else "nocaps"


#: The devices a jail holds, where this process may make them (``CAP_MKNOD`` of the host).
_JAIL_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("urandom", 1, 9))


def _jail(workdir):
    """Without namespaces, as uid 0 (which may ``chroot``): this process's root becomes the run's
    directory ``workdir`` (made by the caller), holding ``tmp/work`` (the working directory, as
    with a private root) and ``dev`` with :data:`_JAIL_DEVICES` where they can be made; nothing of
    the host's tree is then in sight, so no lookup or ``stat`` of a host path (whose dentry and
    inode caches one run could fill for a later one to time, and ``/proc/<pid>`` among them)
    reaches it. The standard library comes from the launcher's image by its fd
    (:class:`_ImageFinder`). The capabilities that could leave the root (``CAP_SYS_CHROOT``
    with a directory fd outside: this process holds none) go with the rest before the program
    runs. Returns the working directory's path inside; raises OSError (no jail then)."""
    import posix

    _, libc, _ = _c()
    posix.mkdir(workdir + "/tmp", 0o755)
    posix.mkdir(workdir + "/tmp/work", 0o700)
    posix.mkdir(workdir + "/dev", 0o755)
    for name, major, minor in _JAIL_DEVICES:
        path = workdir + "/dev/" + name
        try:
            posix.mknod(path, 0o20000 | 0o666, posix.makedev(major, minor))  # S_IFCHR
            posix.chmod(path, 0o666)
        except OSError:
            pass  # a user namespace's root may make none: the program then has no /dev/null
    posix.chmod(workdir, 0o711)  # its uid, once dropped, walks through the root to /tmp/work
    if libc.chroot(workdir.encode()) != 0:
        raise OSError("chroot refused")
    posix.chdir("/")
    return "/tmp/work"


def _capabilities_gone():
    """No capability in the effective, permitted or inheritable set (the ambient set is a subset
    of the permitted one) by ``capget``, which needs no ``/proc``; and where the process is uid 0,
    none that execve could give back: securebits ``NOROOT`` locked, the bounding set empty, or
    ``no_new_privs`` (then execve grants nothing)."""
    import posix

    _, libc, _ = _c()
    header, data = _capability_arrays(0xFFFFFFFF)
    if libc.capget(header, data) != 0 or any(data):
        return False
    if 0 not in posix.getresuid():
        return True
    if libc.prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0) & 0x03 == 0x03 or libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1:
        return True
    return all(libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) != 1 for cap in range(64))


def _image_open():
    """This process holds the image at :data:`IMAGE_FD` (a candidate forked with it)."""
    import posix

    try:
        posix.fstat(IMAGE_FD)
    except OSError:
        return False
    return True


def _reach_stdlib(stdlib):
    """Where a fresh uid could not walk to the standard library (an interpreter under a 0700 home,
    as pyenv's under ``/root``), point the import paths at ``/proc/self/fd/<n>`` of an ``O_PATH``
    fd of it opened now (a process always reaches its own fds; the library's own permissions
    still apply). Landlock's rule, made from the real path, covers both. Nothing to do for a
    candidate importing from the launcher's image (:func:`_import_from_image`)."""
    import posix
    import sys

    if stdlib == IMAGE_PATH:
        return

    path, parts = "", stdlib.strip("/").split("/")
    for i, part in enumerate(parts):
        path += "/" + part
        need = 0o001 | (0o004 if i == len(parts) - 1 else 0)  # others: search (and read the library)
        try:
            if posix.stat(path).st_mode & need != need:
                break
        except OSError:
            return  # no such library: nothing to point at
    else:
        return
    try:
        via = "/proc/self/fd/%d" % posix.open(stdlib, posix.O_PATH | posix.O_DIRECTORY)
    except OSError:
        return

    def moved(entry):
        if type(entry) is str and (entry == stdlib or entry.startswith(stdlib + "/")):
            return via + entry[len(stdlib):]
        return entry

    sys.path[:] = [moved(p) for p in sys.path]
    for module in list(sys.modules.values()):
        # the module's own dict, not getattr: a lazy module's __getattr__ would import on lookup
        search = getattr(module, "__dict__", {}).get("__path__")
        if type(search) is list:
            search[:] = [moved(p) for p in search]
    sys.path_importer_cache.clear()


def _drop_capabilities(user_namespace):
    """Every capability gone (in the user namespace; a process without them cannot regain them:
    in a user namespace, where the program may be its uid 0, the securebits also keep execve and
    setuid from giving any back)."""
    _, libc, _ = _c()
    if user_namespace and libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0:
        raise OSError("securebits refused")
    header, data = _capability_arrays(0)
    if libc.capset(header, data) != 0:
        raise OSError("capset failed")


# --- Landlock ------------------------------------------------------------------------------

_LL_CREATE, _LL_ADD, _LL_RESTRICT = 444, 445, 446  # the same number on every architecture
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_FS_MAKE = 0x1FC0  # MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM


def _landlock(readable, writable, devices, makes_files=True):
    """Restrict this process: read ``readable`` dirs, everything in ``writable`` dirs (but making
    files, directories, links and nodes there where ``makes_files`` is False), read and write
    ``devices``; no TCP; no signal or abstract socket outside. False if unsupported."""
    import posix
    import struct

    ctypes, libc, syscall = _c()
    abi = syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return False
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= 1 << 13  # REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    net = 3 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP: none allowed
    scoped = 3 if abi >= 6 else 0  # abstract unix sockets, signals: only inside this domain
    attr = struct.pack("=QQQ", handled, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = syscall(_LL_CREATE, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    file_rights = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | (handled & (_FS_TRUNCATE | _FS_IOCTL_DEV))
    try:
        rules = [(p, _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE) for p in readable]
        rules += [(p, handled if makes_files else handled & ~_FS_MAKE) for p in writable]
        rules += [(p, file_rights & ~_FS_EXECUTE) for p in devices]
        for path, access in rules:
            try:
                fd = posix.open(path, posix.O_PATH | posix.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", access, fd)
                if syscall(_LL_ADD, ruleset, ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
                    raise OSError("landlock_add_rule failed for %s" % path)
            finally:
                posix.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return syscall(_LL_RESTRICT, ruleset, ctypes.c_uint32(0)) == 0
    finally:
        posix.close(ruleset)


# --- seccomp -------------------------------------------------------------------------------

_ARCHES = {  # machine -> (AUDIT_ARCH_*, syscall numbers)
    "x86_64": (0xC000003E, dict(
        kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, prlimit64=302,
        socket=41, socketpair=53, ioctl=16, clone=56, clone3=435, fork=57, vfork=58, execve=59, execveat=322,
        openat=257, open=2, makes=(83, 258, 88, 266, 85), at_refused=(133, 259), at_absent=(437,), memory=(319,), setsockopt=54,
        cache=(221, 187, 27, 451, 253, 294, 254, 255, 300, 301, 73), futex=202, futex2=(449, 454, 455, 456),
        rw2=(327, 328), fcntl=72, madvise=28, prctl=157, mmap=9, system=(99, 103), filesystems=(137, 138, 136), inodes=(22, 293, 53, 206, 447),
        pid0=(121, 124, 109, 143, 145, 148, 204, 315), pid1=(140, 252), clock=(228, 229, 230, 222),
        hot=(0, 1, 3, 5, 8, 10, 11, 12, 13, 14, 262, 217, 7, 4, 6, 17, 318),
        deny=(101, 310, 311, 424, 434, 438, 272, 308, 165, 166, 155, 161, 321, 298, 323, 250, 248, 249, 304, 303,
              425, 426, 427, 428, 429, 430, 431, 432, 433, 442, 246, 320, 175, 313, 176, 169, 163, 141, 203, 144,
              142, 314, 251, 256, 279, 274, 448, 440, 312, 179, 167, 168, 125),
        ipc=(29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71, 240, 241, 242, 243, 244, 245),
        net=(49, 42, 50, 43, 288, 44, 46, 307),
    )),
    "aarch64": (0xC00000B7, dict(
        kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, prlimit64=261,
        socket=198, socketpair=199, ioctl=29, clone=220, clone3=435, fork=None, vfork=None, execve=221, execveat=281,
        openat=56, open=None, makes=(34, 36), at_refused=(33,), at_absent=(437,), memory=(279,), setsockopt=208,
        cache=(223, 213, 232, 451, 26, 27, 28, 262, 263, 32), futex=98, futex2=(449, 454, 455, 456),
        rw2=(286, 287), fcntl=25, madvise=233, prctl=167, mmap=222, system=(179, 116), filesystems=(43, 44), inodes=(59, 199, 0, 447),
        pid0=(155, 156, 154, 121, 120, 127, 123, 275), pid1=(141, 31), clock=(113, 114, 115, 107),
        hot=(63, 64, 57, 80, 62, 226, 215, 214, 134, 135, 79, 61, 67, 278),
        deny=(117, 270, 271, 424, 434, 438, 97, 268, 40, 39, 41, 51, 280, 241, 282, 219, 217, 218, 265, 264,
              425, 426, 427, 428, 429, 430, 431, 432, 433, 442, 104, 294, 105, 273, 106, 142, 89, 140, 122, 119,
              118, 274, 30, 238, 239, 100, 448, 440, 272, 60, 224, 225, 90),
        ipc=(194, 196, 195, 197, 190, 193, 191, 192, 186, 189, 188, 187, 180, 181, 182, 183, 184, 185),
        net=(200, 203, 201, 202, 242, 206, 211, 269),
    )),
}
# deny (x86_64 names): ptrace, process_vm_readv/writev, pidfd_send_signal/open/getfd, unshare, setns,
# mount, umount2, pivot_root, chroot, bpf, perf_event_open, userfaultfd, keyctl, add_key, request_key,
# open_by_handle_at, name_to_handle_at, io_uring_*, open_tree, move_mount, fsopen, fsconfig, fsmount,
# fspick, mount_setattr, kexec_*, init/finit/delete_module, reboot, acct, setpriority,
# sched_setaffinity, sched_setscheduler, sched_setparam, sched_setattr, ioprio_set, migrate_pages,
# move_pages, get_robust_list, process_mrelease, process_madvise, kcmp, quotactl, swapon, swapoff,
# capget (its pid is in a struct the filter cannot read: it would name and read any process; the
# candidate's own capabilities are checked before the filter is installed).
# pid0, pid1: calls whose first (getpgid, getsid, setpgid, sched_getparam, sched_getscheduler,
# sched_rr_get_interval, sched_getaffinity, sched_getattr) or second argument (getpriority,
# ioprio_get) is a pid: only 0 or the candidate's own, since each answers differently for a pid
# that exists (where namespaces are refused there is no PID namespace to keep others out of sight).
# clock: clock_gettime, clock_getres, clock_nanosleep, timer_create on a clock id that names
# another process's or thread's CPU clock (negative ids but those of pid 0, this process: another
# process's CPU time would time its judge or another candidate).
# ipc: SysV shared memory (shmget, shmat, shmctl, shmdt), semaphores (semget, semop, semctl,
# semtimedop), message queues (msgget, msgsnd, msgrcv, msgctl) and POSIX message queues (mq_open,
# mq_unlink, mq_timedsend, mq_timedreceive, mq_notify, mq_getsetattr): state that would outlive a
# candidate and be seen by the next one where there is no IPC namespace of its own.
# makes, where a run without a private root may make no file (Limits.disk_files): mkdir, mkdirat,
# symlink, symlinkat, creat (and open/openat with O_TMPFILE); open/openat with O_CREAT cannot be
# told from opening a file that exists by its flags: Landlock refuses making one by path.
# openat: only relative to the working directory (AT_FDCWD) when it may write (O_WRONLY, O_RDWR,
# O_CREAT, O_TRUNC: the audit event of an open names no dir_fd, so the guards could not tell where
# a write relative to a directory fd lands); at_refused: mknod, mknodat (fifos and device nodes,
# which have no audit event); at_absent: openat2 (ENOSYS; its flags are out of the filter's reach).
# memory: memfd_create (its pages are counted by no rlimit: RLIMIT_AS counts only what is mapped),
# setsockopt: SO_SNDBUF, SO_RCVBUF and their FORCE forms (up to net.core.wmem_max: megabytes a
# socket would hold in the kernel).
# cache: calls that only serve to set or read state other runs share (the page cache of the files
# every candidate reads, file events): fadvise64, readahead, mincore, cachestat, inotify_init,
# inotify_init1, inotify_add_watch, inotify_rm_watch, fanotify_init, fanotify_mark, flock; and, by
# argument: preadv2/pwritev2 with flags (RWF_NOWAIT reads the page cache's state), fcntl's record
# locks, leases, directory notifications and SIGIO owners (F_GETLK, F_SETLK, F_SETLKW, F_OFD_*,
# F_SETLEASE, F_GETLEASE, F_NOTIFY, F_SETOWN, F_SETOWN_EX, F_SETSIG), madvise advice that reads
# pages in, evicts them or merges them with other processes' (WILLNEED, REMOVE, MERGEABLE, COLD,
# PAGEOUT, POPULATE_READ/WRITE, COLLAPSE), prctl(PR_SET_MEMORY_MERGE), fcntl(F_SETPIPE_SZ) (a
# pipe's pages count against its user's fs.pipe-user-pages-soft, which every candidate of a user
# namespace shares: one growing its pipes to 1 MiB shrank what another could), and futex without
# FUTEX_PRIVATE_FLAG (a shared futex's key is the file page, so two processes mapping the same
# file page, read-only, would meet on it); futex2 (futex_waitv, futex_wake, futex_wait,
# futex_requeue: flags out of the filter's reach) is ENOSYS.
# system: sysinfo (free memory, load, the number of processes: one candidate allocating memory
# moves what another reads), syslog (the kernel's log, which a candidate can write to by
# crashing). filesystems, without a private root only: statfs, fstatfs (and ustat on x86_64): free
# blocks and inodes of the disk every run's directory is on (in a private root every filesystem
# is the run's own tmpfs or one no candidate can write to). mmap: with MAP_HUGETLB (pages from the system's pool
# of huge pages, whose size every process sees through its own allocations failing).
# inodes: pipe, pipe2, socketpair, io_setup, memfd_secret: each takes an inode number from a
# counter the kernel keeps per CPU for all its internal filesystems (get_next_ino), which any
# process reads back as st_ino of a pipe or socket it holds: a candidate making pipes until the
# number reached a value it chose left that value for the next run on its CPU (measured: the next
# candidate's pipe read it plus 15). A candidate has the fds it was given and makes none of these.
# net: bind, connect, listen, accept, accept4, sendto, sendmsg, sendmmsg. With socket() and
# socketpair() refused, the only sockets are the ones a candidate was given; a socket is reached by
# another process only through an address (connect, or sendto/sendmsg naming it), and gets one only
# through bind or autobind (bind, connect, sendto/sendmsg with an address, or a write with
# SO_PASSCRED, which names it but leaves it connected to its own peer). With these refused, no
# socket a candidate holds can meet another process's: candidates may share a network namespace
# (:func:`~.boot._candidate_launcher`), and none reaches the host's abstract unix sockets where
# there is no network namespace of its own.
_RET_ALLOW, _RET_KILL, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38
# TCGETS (isatty), TIOCGWINSZ (the terminal's size), FIONREAD, FIONBIO, FIONCLEX, FIOCLEX: what
# the interpreter and the standard library ask of an fd; every other request is refused (among
# them TIOCSTI, TIOCLINUX, and FS_IOC_FIEMAP, which tells where on the disk a file's blocks are:
# without a private root, where the filesystem's allocator, which every run moves, is).
_IOCTL_ALLOWED = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)
_FCNTL_REFUSED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026, 8, 15, 10,  # F_GETLK ... F_NOTIFY, F_SETOWN(_EX), F_SETSIG
                  1031)  # F_SETPIPE_SZ
_MADVISE_CACHE = (3, 9, 12, 20, 21, 22, 23, 25)  # WILLNEED, REMOVE, MERGEABLE, COLD, PAGEOUT, POPULATE_*, COLLAPSE
_PR_SET_MEMORY_MERGE = 67
_MAP_HUGETLB = 0x40000
_FUTEX_PRIVATE_FLAG = 128
_BUFFER_OPTIONS = (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE
_AT_FDCWD = 0xFFFFFF9C  # -100, as the low 32 bits of the argument
_CLOCK_OF_PID_0 = 0xFFFFFFF8  # ((~0) << 3): the CPU clocks of pid 0 (this process, this thread) and up
_OPEN_WRITES = 0o1 | 0o2 | 0o100 | 0o1000  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC (O_TMPFILE needs one of the first two)
_O_TMPFILE = 0o20000000  # __O_TMPFILE, the same on x86_64 and aarch64


# The parts of a candidate's job its confinement depends on (besides its uid): a spare candidate
# of the candidate launcher is confined with the values the caller sent for the run it will serve
# (boot._spare_job), and runs a job only if they match.
PREPARED = ("refuse", "stdlib", "tmpfs_kb", "tmpfs_inodes", "cpu_s", "fsize", "nofile", "address_space", "disk_files")

_PROGRAMS = {}  # (machine, private root, makes files) -> (program for pid 0, offsets of the pid in it): built once, in the launcher


def seccomp_program(machine, me, private_root=False, makes_files=True):
    """The filter as bytes of ``struct sock_filter`` (None for an architecture it does not know).

    ``me``: this process's pid, the only target signals may go to. ``private_root``: the process
    sees only filesystems of its own or that no candidate writes to, so ``statfs`` may stay.
    ``makes_files`` False: ``mkdir``, ``symlink``, ``creat`` and ``open`` with ``O_TMPFILE`` are
    refused (a run without a private root that may make no file on the shared disk; Landlock
    refuses the rest of making files, by path). Built once per machine, root and ``makes_files``
    (with ``me`` written into its two comparisons for each call)."""
    import struct

    if machine not in _ARCHES:
        return None
    key = (machine, bool(private_root), bool(makes_files))
    if key not in _PROGRAMS:
        marker = 0xFFFFFFFF  # no pid: pid_t is at most 2**22
        program = bytearray(_build_program(machine, marker, key[1], key[2]))
        at = [i + 4 for i in range(0, len(program), 8) if struct.unpack_from("=I", program, i + 4)[0] == marker]
        for offset in at:
            struct.pack_into("=I", program, offset, 0)
        _PROGRAMS[key] = (bytes(program), tuple(at))
    template, at = _PROGRAMS[key]
    program = bytearray(template)
    for offset in at:
        struct.pack_into("=I", program, offset, me)
    return bytes(program)


def _build_program(machine, me, private_root, makes_files=True):
    import struct

    audit_arch, nr = _ARCHES[machine]
    code = []  # (opcode, jt label or offset, jf label or offset, k)

    def ld(offset):
        code.append((0x20, 0, 0, offset))  # BPF_LD | BPF_W | BPF_ABS

    def jeq(k, jt, jf=0):
        code.append((0x15, jt, jf, k))

    def ret(k):
        code.append((0x06, 0, 0, k))

    def label(name):
        code.append(("label", name))

    ld(4)
    jeq(audit_arch, 1)
    ret(_RET_KILL)
    ld(0)
    code.append((0x35, "eperm", 0, 0x40000000))  # JGE: x32 and other ABIs
    jeq(nr["openat"], "openat")
    if not makes_files and nr["open"] is not None:
        jeq(nr["open"], "open")
    jeq(nr["futex"], "futex")
    jeq(nr["mmap"], "mmap")
    for number in nr["hot"]:  # the most frequent calls, none of them refused: decided first
        jeq(number, "allow")
    refused = (nr["deny"] + nr["ipc"] + nr["net"] + nr["at_refused"] + nr["memory"] + nr["cache"] + nr["system"]
               + nr["inodes"])
    for number in refused + (() if private_root else nr["filesystems"]) + (() if makes_files else nr["makes"]):
        jeq(number, "eperm")
    for number in nr["at_absent"] + nr["futex2"]:
        jeq(number, "enosys")
    for name in ("clone", "fork", "vfork", "execve", "execveat", "socket"):
        if nr[name] is not None:
            jeq(nr[name], "eperm")
    jeq(nr["clone3"], "enosys")
    for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        jeq(nr[name], "self")
    jeq(nr["prlimit64"], "self_or_zero")
    for number in nr["pid0"]:
        jeq(number, "self_or_zero")
    for number in nr["pid1"]:
        jeq(number, "self_or_zero_1")
    for number in nr["clock"]:
        jeq(number, "clock")
    jeq(nr["setsockopt"], "setsockopt")
    jeq(nr["ioctl"], "ioctl")
    jeq(nr["fcntl"], "fcntl")
    jeq(nr["madvise"], "madvise")
    for number in nr["rw2"]:
        jeq(number, "rw2")
    jeq(nr["prctl"], "prctl")
    ret(_RET_ALLOW)
    label("mmap")
    ld(40)  # args[3]: the flags
    code.append((0x45, "eperm", "allow", _MAP_HUGETLB))  # JSET
    label("futex")
    ld(24)  # args[1]: the operation
    code.append((0x45, "allow", "eperm", _FUTEX_PRIVATE_FLAG))  # JSET
    label("fcntl")
    ld(24)  # args[1]: the command
    for command in _FCNTL_REFUSED:
        jeq(command, "eperm")
    ret(_RET_ALLOW)
    label("madvise")
    ld(32)  # args[2]: the advice
    for advice in _MADVISE_CACHE:
        jeq(advice, "eperm")
    ret(_RET_ALLOW)
    label("rw2")
    ld(56)  # args[5]: the RWF_* flags
    jeq(0, "allow", "eperm")
    label("prctl")
    ld(16)  # args[0]: the option
    jeq(_PR_SET_MEMORY_MERGE, "eperm", "allow")
    label("setsockopt")
    ld(32)  # args[2]: the option
    for option in _BUFFER_OPTIONS:
        jeq(option, "eperm")
    ret(_RET_ALLOW)
    label("openat")
    if not makes_files:
        ld(32)  # args[2]: the flags
        code.append((0x45, "eperm", 0, _O_TMPFILE))  # JSET: an unnamed file, made all the same
    ld(16)  # args[0]: the directory fd
    jeq(_AT_FDCWD, "allow")
    ld(32)  # args[2]: the flags
    code.append((0x45, "eperm", "allow", _OPEN_WRITES))  # JSET
    if not makes_files and nr["open"] is not None:
        label("open")
        ld(24)  # args[1]: the flags
        code.append((0x45, "eperm", "allow", _O_TMPFILE))  # JSET
    label("self")
    ld(16)  # args[0], low 32 bits (pid_t)
    jeq(me, "allow", "eperm")
    label("self_or_zero")
    ld(16)
    jeq(0, "allow")
    jeq(me, "allow", "eperm")
    label("self_or_zero_1")
    ld(24)  # args[1], low 32 bits
    jeq(0, "allow")
    jeq(me, "allow", "eperm")
    label("clock")
    ld(16)  # args[0]: the clock id, low 32 bits
    code.append((0x35, "allow", 0, _CLOCK_OF_PID_0))  # JGE: this process's (or thread's) CPU clock
    code.append((0x35, "eperm", "allow", 0x80000000))  # another process's: negative
    label("ioctl")
    ld(24)  # args[1], the request
    for request in _IOCTL_ALLOWED:
        jeq(request, "allow")
    ret(_RET_ERRNO | _EPERM)
    label("allow")
    ret(_RET_ALLOW)
    label("eperm")
    ret(_RET_ERRNO | _EPERM)
    label("enosys")
    ret(_RET_ERRNO | _ENOSYS)

    where, index = {}, 0
    for item in code:
        if item[0] == "label":
            where[item[1]] = index
        else:
            index += 1
    out = bytearray()
    index = 0
    for item in code:
        if item[0] == "label":
            continue
        op, jt, jf, k = item
        jt = where[jt] - index - 1 if type(jt) is str else jt
        jf = where[jf] - index - 1 if type(jf) is str else jf
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("seccomp jump out of range")
        out += struct.pack("=HBBI", op, jt, jf, k)
        index += 1
    return bytes(out)


_FILTERS = {}  # (pid, private root, makes files) -> (buffer, struct sock_fprog) made ahead (prepare_seccomp)


def prepare_seccomp(pid, private_root=False, makes_files=True):
    """Make the filter for a process of pid ``pid`` ahead, in the launcher: the candidate
    launcher's candidates are each process 1 of their PID namespace, in a private root, so
    theirs is made once."""
    import posix

    program = seccomp_program(posix.uname().machine, pid, private_root, makes_files)
    if program is not None:
        _FILTERS[(pid, bool(private_root), bool(makes_files))] = _filter(program)


def _filter(program):
    """``(buffer, struct sock_fprog)`` of a filter's bytes (the buffer must outlive the install)."""
    ctypes = _c()[0]
    buffer = ctypes.create_string_buffer(program, len(program))
    return buffer, _CTYPES[3](len(program) // 8, ctypes.addressof(buffer))


def _install_filter(fprog):
    """``no_new_privs``, then the filter on this process; False if refused."""
    ctypes, libc, _ = _c()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) == 0


def install_prefilter():
    """In the candidate launcher, once: a filter that allows every call but reads an argument
    first. The kernel caches, per filter, which system calls it allows whatever their arguments,
    and to build that cache for a new filter it runs the filter once per system call number
    (hundreds of runs of the candidates' 200-odd instructions, under a lock, at each candidate's
    install: about 0.2 ms here); a call the filters below it do not always allow is never
    tried again. Under this one none is, so installing the candidates' filter costs 0.05 ms, and
    each of their calls runs both filters (8 ns more a call than with the cache, measured). The
    candidates' filter decides what they may do: this one refuses nothing. True if installed."""
    import struct

    program = struct.pack("=HBBI", 0x20, 0, 0, 16) + struct.pack("=HBBI", 0x06, 0, 0, _RET_ALLOW)  # ld args[0]; ret ALLOW
    buffer, fprog = _filter(program)
    return _install_filter(fprog)


def _seccomp(private_root=False, makes_files=True):
    """Install the filter on this process (inherited by anything it could start); ``private_root``:
    this process's root is a private one, ``makes_files``: it may make files
    (:func:`seccomp_program`). False if unsupported."""
    import posix

    key = (posix.getpid(), bool(private_root), bool(makes_files))
    if key not in _FILTERS:
        prepare_seccomp(*key)
        if key not in _FILTERS:
            return False
    return _install_filter(_FILTERS[key][1])


# --- rlimits -------------------------------------------------------------------------------

def limit(job, init=False):
    """rlimits; ``init``: this process is process 1 of its PID namespace, which ignores SIGXCPU,
    so the CPU limit's soft and hard values are one (SIGKILL when it is reached)."""
    import resource

    def cap(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    cpu = job["cpu_s"]
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu if init else cpu + 1))
    except (ValueError, OSError):
        pass
    cap(resource.RLIMIT_FSIZE, job["fsize"])
    cap(resource.RLIMIT_NOFILE, job["nofile"])
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NPROC, 1)
    # Signals queued pending count against the user's (every user namespace's creator's too):
    # one candidate holding thousands would leave another room for fewer. With 0, none is queued
    # (kill()'s ordinary signals, SIGXCPU, SIGPIPE and the timeouts' SIGKILL still arrive).
    cap(resource.RLIMIT_SIGPENDING, 0)
    cap(resource.RLIMIT_AS, job["address_space"])


def confine(job):
    """Isolate this process; ``(working directory, layer names)``. The caller then checks the
    layers against the required minimum before any untrusted code runs."""
    import posix

    refuse = job["refuse"]
    layers = []
    workdir = job["workdir"]
    real_root = False
    namespaced = False
    if IN_LAUNCHER:  # the caller sends a job that refuses namespaces, chroot or seccomp to the launcher itself
        workdir = _launcher_namespaces(job, layers)
        real_root, namespaced = LAUNCHER_REAL_ROOT, True
    elif "namespaces" not in refuse:
        try:
            real_root = _namespaces(job, layers)
            namespaced = True
        except OSError:
            layers = []
    # uid 0 whether or not the namespaces were made (a container's root that may not make them,
    # or uid 0 of a rootless container's user namespace, keeps uid 0 and its capabilities
    # otherwise): dropped below, after Landlock's rules are made from paths only root may walk.
    # Real root gets the run's fresh uid; uid 0 of a user namespace another uid mapped there
    # (read from /proc, so before any root of its own).
    root = real_root or (not namespaced and posix.geteuid() == 0)
    ids, groups_fixed = None, False
    if root:
        if real_root or _real_root():
            ids = (job["uid"], job["uid"])
        else:
            ids, groups_fixed = _mapped_ids(job["uid"]), _setgroups_denied()
    holds_image = IMAGE_PATH is not None and _image_open()  # a fork of the launcher holding the image
    if namespaced and not IN_LAUNCHER and "chroot" not in refuse:
        try:
            workdir = _new_root(job, real_root)
            layers.append("chroot")
        except OSError:
            pass
    elif root and not namespaced and "chroot" not in refuse and holds_image and _IMAGE_MODULES:
        try:
            workdir = _jail(workdir)
            layers.append("jail")
        except OSError:
            pass
    posix.chdir(workdir)
    limit(job, init="pidns" in layers)
    if not root and namespaced:
        _drop_capabilities(user_namespace="userns" in layers)
    # Without a private root the standard library comes from the launcher's image in memory (its
    # fd kept by the launcher's fork: boot._zygote_child), never the host's files; the guards and
    # Landlock then allow reading none of those.
    readable = [job["stdlib"]]
    if holds_image:
        if "chroot" in layers:  # a root of its own, with a copy of the image in it (_populate)
            posix.close(IMAGE_FD)
            if _ROOT_IMAGE_IN:
                _import_from_image(job["stdlib"], ROOT_IMAGE)
                job["stdlib"], readable = ROOT_IMAGE, [ROOT_IMAGE_DIR]
        else:
            _import_from_image(job["stdlib"])
            job["stdlib"], readable = IMAGE_PATH, []
    # Without a private root the working directory is on the caller's disk, which concurrent runs
    # share: the inode numbers a new file gets there tell what other runs hold (ext4 gives the
    # first free one), so a run makes none unless its job allows it (Limits.disk_files).
    makes_files = "chroot" in layers or bool(job.get("disk_files"))
    if "landlock" not in refuse:
        try:
            if _landlock(readable, [workdir], ["/dev/null", "/dev/zero", "/dev/urandom"], makes_files):
                layers.append("landlock")
        except OSError:
            pass
    if root:
        drop = _drop_root(ids, workdir, job["stdlib"], "chroot" in layers, groups_fixed)
        layers.insert(layers.index("landlock") if "landlock" in layers else len(layers), drop)
    if not _capabilities_gone():  # before the filter, which refuses capget
        # Not uid 0 and not namespaced, yet holding capabilities (ambient or file ones given to
        # the user): dropped; then every mode is checked alike, and none runs with any left.
        try:
            _drop_capabilities(user_namespace=False)
        except OSError:
            pass
        if not _capabilities_gone():
            posix._exit(71)
    if "seccomp" not in refuse and _seccomp("chroot" in layers, makes_files):
        layers.append("seccomp")
    elif IN_LAUNCHER:
        # Candidates of the candidate launcher share its network and IPC namespaces (and, not
        # root, its user namespace's keyrings): only seccomp (which refuses every socket but an
        # AF_UNIX pair, any address, SysV IPC, mqueues and the key calls) keeps them apart, so
        # none runs without it. Never reached in practice: that launcher starts only where its
        # probe installed the filter, and the caller sends it no job that refuses seccomp.
        posix._exit(71)
    return workdir, layers
