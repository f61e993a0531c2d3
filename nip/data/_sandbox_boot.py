"""Bootstrap that :func:`nip.data.sandbox.run_in_sandbox` runs *inside* the sandboxed child.

Not imported by nip: copied into the child's directory and run as its main script. Its audit
hook (PEP 578) ends the process (exit :data:`VIOLATION_EXIT_CODE`, a ``nip-sandbox-violation:``
line on stderr) on processes, sockets, writes outside the directory, ``ctypes``, rlimits and
walking live objects (which could disarm the hook); ending it, not raising, so code cannot
catch it.
"""

import os
import sys

VIOLATION_EXIT_CODE = 97
CODE_FILE = "_nip_code.py"

_ALWAYS_BLOCKED = frozenset({
    "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "subprocess.Popen", "pty.spawn",
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
    "socket.gethostbyname", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "resource.setrlimit", "resource.prlimit", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "sys._current_frames", "webbrowser.open", "urllib.Request",
})  # fmt: skip
_BLOCKED_IMPORTS = frozenset({"_posixsubprocess", "_ctypes", "ctypes", "multiprocessing"})
# Events whose arguments are paths that must stay inside the sandbox directory.
_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.mkdir": (0,),
    "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.symlink": (1,),
    "os.link": (0, 1), "os.utime": (0,), "os.chdir": (0,), "os.chflags": (0,),
    "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
}  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _make_hook(root: str):
    realpath, join, fspath = os.path.realpath, os.path.join, os.fspath
    write, exit_now = os.write, os._exit

    def inside(path) -> bool:
        if isinstance(path, int):  # an already-open file descriptor
            return True
        try:
            path = fspath(path)
        except TypeError:
            return False
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        resolved = realpath(join(root, path))
        return resolved == root or resolved.startswith(root + os.sep)

    def violation(event: str, args) -> None:
        detail = repr(args)[:300]
        write(2, f"\nnip-sandbox-violation: {event} {detail}\n".encode("utf-8", "replace"))
        exit_now(VIOLATION_EXIT_CODE)

    def hook(event: str, args) -> None:
        if event in _ALWAYS_BLOCKED:
            violation(event, args)
        elif event == "import":
            if args[0] in _BLOCKED_IMPORTS:
                violation(event, args[:1])
        elif event == "open":
            path, mode, flags = args
            writes = any(c in mode for c in "wax+") if mode else bool(flags & _WRITE_FLAGS)
            if writes and path is not None and not inside(path):
                violation(event, args)
        elif event in _PATH_EVENTS:
            for position in _PATH_EVENTS[event]:
                if position < len(args) and not inside(args[position]):
                    violation(event, args)

    return hook


def _main() -> None:
    sys.dont_write_bytecode = True
    root = os.path.realpath(os.getcwd())
    with open(CODE_FILE, encoding="utf-8") as file:
        source = file.read()
    sys.addaudithook(_make_hook(root))
    code = compile(source, "<sandbox>", "exec")
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})


if __name__ == "__main__":
    _main()
